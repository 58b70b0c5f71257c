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

// TestRetryWait checks the equal jitter: the wait after call n is within
// [d/2, d], d = min(Max, Initial<<(n-1)), so it never shrinks from one
// call to the next and never exceeds Max.
func TestRetryWait(t *testing.T) {
	r := Retry{Attempts: 100, Initial: 10 * time.Millisecond, Max: 300 * time.Millisecond}
	for n := 1; n < 100; n++ {
		d := min(r.Max, r.Initial<<min(n-1, 20))
		for range 50 {
			if w := r.wait(n); w < d/2 || w > d {
				t.Fatalf("wait(%d) = %v, want in [%v, %v]", n, w, d/2, d)
			}
		}
	}
	huge := Retry{Attempts: 100, Initial: time.Hour, Max: time.Duration(1<<63 - 1)}
	for n := 1; n < 100; n++ {
		if w := huge.wait(n); w < time.Hour/2 {
			t.Fatalf("huge wait(%d) = %v", n, w)
		}
	}
	if !(Retry{Attempts: 2}).retries(1, errors.New("x")) || (Retry{Attempts: 2}).retries(2, errors.New("x")) || (Retry{}).retries(1, errors.New("x")) {
		t.Fatal("retries: wrong count")
	}
	no := Retry{Attempts: 3, Retryable: func(error) bool { return false }}
	if no.retries(1, errors.New("x")) {
		t.Fatal("retries: Retryable ignored")
	}
}
