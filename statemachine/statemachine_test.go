package statemachine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlonce/sqlonce"
)

type status string

const (
	created   status = "created"
	paid      status = "paid"
	shipped   status = "shipped"
	cancelled status = "cancelled"
)

func orders(t *testing.T) *Machine[status] {
	t.Helper()
	m, err := New(Edge(created, paid), Edge(paid, shipped), Edge(created, cancelled))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edges []Transition[status]
	}{
		{"empty", nil},
		{"zero from", []Transition[status]{Edge(created, paid), Edge("", paid)}},
		{"zero to", []Transition[status]{Edge(created, "")}},
		{"self", []Transition[status]{Edge(paid, paid)}},
		{"duplicate", []Transition[status]{Edge(created, paid), Edge(paid, shipped), Edge(created, paid)}},
	} {
		m, err := New(tc.edges...)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || m != nil {
			t.Errorf("%s: got %v, %v; want nil, ErrInvalidArgument", tc.name, m, err)
		}
	}
	// Integer states: 0 is the zero state.
	if _, err := New(Edge(0, 1)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("int zero state: got %v", err)
	}
	if _, err := New(Edge(1, 2), Edge(2, 1)); err != nil {
		t.Errorf("int cycle: %v", err)
	}
}

func TestMustPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Must did not panic on an invalid machine")
		}
	}()
	Must(New[status]())
}

func TestAllowsReaches(t *testing.T) {
	m := orders(t)
	for _, tc := range []struct {
		from, to        status
		allows, reaches bool
	}{
		{created, paid, true, true},
		{paid, shipped, true, true},
		{created, cancelled, true, true},
		{created, shipped, false, true}, // two steps: reachable, not declared
		{shipped, created, false, false},
		{paid, created, false, false},
		{paid, cancelled, false, false},
		{cancelled, paid, false, false},
		{created, created, false, false}, // no cycle through created
		{shipped, shipped, false, false},
		{"unknown", paid, false, false},
		{created, "unknown", false, false},
	} {
		if got := m.Allows(tc.from, tc.to); got != tc.allows {
			t.Errorf("Allows(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.allows)
		}
		if got := m.Reaches(tc.from, tc.to); got != tc.reaches {
			t.Errorf("Reaches(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.reaches)
		}
	}
}

func TestReachesCycle(t *testing.T) {
	// pending -> failed -> pending (retry), pending -> done.
	m := Must(New(Edge("pending", "failed"), Edge("failed", "pending"), Edge("pending", "done")))
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"pending", "pending", true}, // round the cycle
		{"failed", "failed", true},
		{"failed", "done", true},
		{"pending", "done", true},
		{"done", "pending", false},
		{"done", "done", false},
	} {
		if got := m.Reaches(tc.a, tc.b); got != tc.want {
			t.Errorf("Reaches(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// rows returns an update func that reports n rows and records that it ran.
func rows(n int64, ran *bool) func(context.Context) (int64, error) {
	return func(context.Context) (int64, error) {
		*ran = true
		return n, nil
	}
}

func at(s status) func(context.Context) (status, error) {
	return func(context.Context) (status, error) { return s, nil }
}

func TestTransition(t *testing.T) {
	ctx := context.Background()
	m := orders(t)
	errRead := errors.New("read failed")
	errUpdate := errors.New("update failed")
	for _, tc := range []struct {
		name     string
		from, to status
		update   func(context.Context) (int64, error)
		current  func(context.Context) (status, error)
		want     sqlonce.Outcome
		wantErr  error
	}{
		{"one row", created, paid, rows(1, new(bool)), at(created), sqlonce.FirstRun, nil},
		{"at target", created, paid, rows(0, new(bool)), at(paid), sqlonce.AlreadyDone, nil},
		{"past target", created, paid, rows(0, new(bool)), at(shipped), sqlonce.AlreadyDone, nil},
		{"other branch", created, paid, rows(0, new(bool)), at(cancelled), 0, sqlonce.ErrInvalidTransition},
		{"unknown state", created, paid, rows(0, new(bool)), at("lost"), 0, sqlonce.ErrInvalidTransition},
		{"before from", paid, shipped, rows(0, new(bool)), at(created), 0, sqlonce.ErrInvalidTransition},
		{"stale", created, paid, rows(0, new(bool)), at(created), 0, sqlonce.ErrStaleRead},
		{"gone sql", created, paid, rows(0, new(bool)), func(context.Context) (status, error) { return "", sql.ErrNoRows }, 0, sqlonce.ErrNotFound},
		{"gone wrapped", created, paid, rows(0, new(bool)), func(context.Context) (status, error) {
			return "", fmt.Errorf("get: %w", sql.ErrNoRows)
		}, 0, sqlonce.ErrNotFound},
		{"gone sentinel", created, paid, rows(0, new(bool)), func(context.Context) (status, error) { return "", sqlonce.ErrNotFound }, 0, sqlonce.ErrNotFound},
		{"read error", created, paid, rows(0, new(bool)), func(context.Context) (status, error) { return "", errRead }, 0, errRead},
		{"update error", created, paid, func(context.Context) (int64, error) { return 0, errUpdate }, at(paid), 0, errUpdate},
		{"two rows", created, paid, rows(2, new(bool)), at(paid), 0, sqlonce.ErrTooManyRows},
		{"negative rows", created, paid, rows(-1, new(bool)), at(paid), 0, sqlonce.ErrInvalidArgument},
		{"nil update", created, paid, nil, at(paid), 0, sqlonce.ErrInvalidArgument},
		{"nil current", created, paid, rows(0, new(bool)), nil, 0, sqlonce.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := m.Transition(ctx, tc.from, tc.to, tc.update, tc.current)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if res.Outcome != tc.want {
				t.Fatalf("outcome = %v, want %v", res.Outcome, tc.want)
			}
			if errors.Is(err, errRead) && errors.Is(err, sqlonce.ErrNotFound) {
				t.Fatalf("a failed read reported as not found: %v", err)
			}
		})
	}
}

func TestTransitionErrorCarriesStates(t *testing.T) {
	m := orders(t)
	_, err := m.Transition(context.Background(), created, paid, rows(0, new(bool)), at(cancelled))
	te, ok := errors.AsType[*TransitionError[status]](err)
	if !ok {
		t.Fatalf("got %T %v, want *TransitionError[status]", err, err)
	}
	if te.From != created || te.To != paid || te.Current != cancelled || !te.HasCurrent || te.Undeclared {
		t.Fatalf("got %+v", te)
	}
	if want := "sqlonce: invalid state transition: created -> paid, but the row is at cancelled"; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
}

func TestUndeclaredRefusedBeforeUpdate(t *testing.T) {
	m := orders(t)
	for _, tc := range []struct{ from, to status }{
		{shipped, created}, // backwards
		{created, shipped}, // reachable, but not one step
		{paid, paid},       // self
		{"lost", paid},     // unknown state
		{"", paid},         // zero state
	} {
		ran, read := false, false
		_, err := m.Transition(context.Background(), tc.from, tc.to, rows(1, &ran), func(context.Context) (status, error) {
			read = true
			return tc.to, nil
		})
		te, ok := errors.AsType[*TransitionError[status]](err)
		if !ok || !errors.Is(err, sqlonce.ErrInvalidTransition) || !te.Undeclared || te.HasCurrent || te.From != tc.from || te.To != tc.to {
			t.Errorf("%s -> %s: got %#v (%v)", tc.from, tc.to, te, err)
		}
		if ran || read {
			t.Errorf("%s -> %s: update ran %v, current ran %v; want neither", tc.from, tc.to, ran, read)
		}
	}
}

func TestCurrentNotCalledOnFirstRun(t *testing.T) {
	m := orders(t)
	res, err := m.Transition(context.Background(), created, paid, rows(1, new(bool)), func(context.Context) (status, error) {
		t.Fatal("current called although the update affected a row")
		return "", nil
	})
	if err != nil || !res.FirstRun() {
		t.Fatalf("got %v, %v", res, err)
	}
}

// In a machine with a cycle, a row whose read still shows from must be a
// stale read, never AlreadyDone: the UPDATE saw another state, and a read
// that disagrees with it says nothing about where the row is. Taking "from
// is reachable from to round the cycle" as done would report success for a
// row that may be anywhere, cancelled included.
func TestTransitionCycleStaleRead(t *testing.T) {
	m := Must(New(
		Edge(created, paid), Edge(paid, created), // refund and retry
		Edge(created, cancelled),
	))
	res, err := m.Transition(context.Background(), created, paid, rows(0, new(bool)), at(created))
	if !errors.Is(err, sqlonce.ErrStaleRead) || !sqlonce.IsRetryable(err) {
		t.Fatalf("got %v, %v; want ErrStaleRead", res, err)
	}
	// The back edge too.
	res, err = m.Transition(context.Background(), paid, created, rows(0, new(bool)), at(paid))
	if !errors.Is(err, sqlonce.ErrStaleRead) {
		t.Fatalf("back edge: got %v, %v; want ErrStaleRead", res, err)
	}
	// cancelled follows paid round the cycle (paid -> created -> cancelled):
	// reachability is all "past" means, so that is done.
	res, err = m.Transition(context.Background(), created, paid, rows(0, new(bool)), at(cancelled))
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("cancelled: got %v, %v; want AlreadyDone", res, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := orders(t)
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				_, _ = m.Transition(context.Background(), created, paid, rows(0, new(bool)), at(shipped))
				_ = m.Reaches(created, shipped)
			}
		}()
	}
	for range 8 {
		<-done
	}
}
