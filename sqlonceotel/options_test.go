package sqlonceotel_test

import (
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// A nil option is refused with an error, as every other constructor of
// the project refuses one, rather than a panic.
func TestNewNilOption(t *testing.T) {
	o, err := sqlonceotel.New(sqlonceotel.WithDBSystem("postgresql"), nil)
	if !errors.Is(err, sqlonce.ErrInvalidArgument) || o != nil {
		t.Fatalf("New(nil option) = %v, %v; want ErrInvalidArgument", o, err)
	}
}
