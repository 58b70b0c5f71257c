package sqlonce

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorType(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", ErrKeyReuse), "key_reuse"},
		{fmt.Errorf("x: %w", ErrInProgress), "in_progress"},
		{ErrLeaseLost, "lease_lost"},
		{ErrStaleRead, "stale_read"},
		{errors.Join(errors.New("a"), ErrCommitUnknown), "commit_unknown"},
		{fmt.Errorf("run: %w", context.Canceled), "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{errors.New("boom"), "other"},
	} {
		if got := ErrorType(c.err); got != c.want {
			t.Errorf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestEventStatusString(t *testing.T) {
	seen := map[string]bool{}
	for o := EventError; o <= EventOK; o++ {
		s := o.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("outcome %d: %q", o, s)
		}
		seen[s] = true
	}
	if s := EventStatus(200).String(); s != "unknown" {
		t.Errorf("outcome 200: %q", s)
	}
}

func TestObserveNil(t *testing.T) {
	if d := Observe[int](nil, ObserverFunc(func(context.Context, Event) {})); d != nil {
		t.Fatalf("Observe(nil driver) = %v", d)
	}
}
