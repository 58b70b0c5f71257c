package obs

import (
	"context"
	"reflect"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

type capsEngine struct{ driver.Engine[int] }

func (e capsEngine) Capabilities() driver.Capabilities[int] {
	return driver.Capabilities[int]{Autocommitter: e}
}

func (capsEngine) Autocommit(context.Context, func(context.Context, int) error) error { return nil }

type capsDriver struct{}

func (capsDriver) Engine() driver.Engine[int] { return capsEngine{} }

// TestWrappersKeepCapabilities: a driver with an Observer, and Bare's
// without, keep the engine and so its capabilities.
func TestWrappersKeepCapabilities(t *testing.T) {
	observed := sqlonce.Observe[int](capsDriver{}, sqlonce.ObserverFunc(func(context.Context, sqlonce.Event) {}))
	for name, d := range map[string]sqlonce.Driver[int]{"Observe": observed, "Bare": Bare(observed)} {
		if got, want := d.Engine().Capabilities(), (capsDriver{}).Engine().Capabilities(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: capabilities %+v, want %+v", name, got, want)
		}
	}
}
