package dedupe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
)

func TestOperationCheck(t *testing.T) {
	fn := func(context.Context, int, StepState) ([]byte, error) { return nil, nil }
	out := func(context.Context, StepState) ([]byte, error) { return nil, nil }
	for name, op := range map[string]*Operation[int]{
		"nil":        nil,
		"no name":    {Steps: []Step[int]{{Name: "a", InTx: fn}}},
		"no steps":   {Name: "op"},
		"no fn":      {Name: "op", Steps: []Step[int]{{Name: "a"}}},
		"both fns":   {Name: "op", Steps: []Step[int]{{Name: "a", InTx: fn, Outside: out}}},
		"twice":      {Name: "op", Steps: []Step[int]{{Name: "a", InTx: fn}, {Name: "a", Outside: out}}},
		"no step":    {Name: "op", Steps: []Step[int]{{InTx: fn}}},
		"long name":  {Name: string(make([]byte, sqlonce.MaxKeyLen+1)), Steps: []Step[int]{{Name: "a", InTx: fn}}},
		"neg lease":  {Name: "op", Lease: -time.Second, Steps: []Step[int]{{Name: "a", InTx: fn}}},
		"tiny lease": {Name: "op", Lease: time.Nanosecond, Steps: []Step[int]{{Name: "a", InTx: fn}}},
	} {
		if err := op.check(); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	ok := &Operation[int]{Name: "op", Steps: []Step[int]{{Name: "a", InTx: fn}, {Name: "b", Outside: out}}}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
}
