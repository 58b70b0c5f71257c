package statemachine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Transition is one declared edge of a Machine.
type Transition[S comparable] struct {
	From, To S
}

// Machine is a set of declared transitions between states of type S,
// typically a string or integer type of the caller's (type OrderStatus
// string). It is immutable and safe for concurrent use.
type Machine[S comparable] struct {
	next      map[S][]S
	declared  map[Transition[S]]bool
	reachable map[S]map[S]bool // reachable[a][b]: b can follow a, in one or more steps
}

// New returns a machine with the given transitions. It returns an error
// matching sqlonce.ErrInvalidArgument for no transitions, a zero-valued
// state, a self-transition or a duplicate.
func New[S comparable](transitions ...Transition[S]) (*Machine[S], error) {
	if len(transitions) == 0 {
		return nil, fmt.Errorf("%w: a machine needs at least one transition", sqlonce.ErrInvalidArgument)
	}
	var zero S
	m := &Machine[S]{next: map[S][]S{}, declared: map[Transition[S]]bool{}, reachable: map[S]map[S]bool{}}
	for _, t := range transitions {
		switch {
		case t.From == zero || t.To == zero:
			return nil, fmt.Errorf("%w: transition %v -> %v uses the zero state", sqlonce.ErrInvalidArgument, t.From, t.To)
		case t.From == t.To:
			return nil, fmt.Errorf("%w: transition %v -> %v goes nowhere", sqlonce.ErrInvalidArgument, t.From, t.To)
		case m.declared[t]:
			return nil, fmt.Errorf("%w: transition %v -> %v declared twice", sqlonce.ErrInvalidArgument, t.From, t.To)
		}
		m.declared[t] = true
		m.next[t.From] = append(m.next[t.From], t.To)
	}
	// Transitive closure by a walk from every state: machines are small.
	for from := range m.next {
		seen := map[S]bool{}
		stack := append([]S(nil), m.next[from]...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] {
				continue
			}
			seen[s] = true
			stack = append(stack, m.next[s]...)
		}
		m.reachable[from] = seen
	}
	return m, nil
}

// Must is New that panics on error, for machines declared as package
// variables.
func Must[S comparable](m *Machine[S], err error) *Machine[S] {
	if err != nil {
		panic(err)
	}
	return m
}

// Allows reports whether from -> to is a declared transition.
func (m *Machine[S]) Allows(from, to S) bool { return m.declared[Transition[S]{from, to}] }

// Reaches reports whether state b can follow state a in one or more
// declared transitions.
func (m *Machine[S]) Reaches(a, b S) bool { return m.reachable[a][b] }

// Transition makes the declared transition from -> to through the caller's
// conditional UPDATE and judges it by the rows it affected:
//
//	UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'created'
//
// update runs that statement and returns its affected-row count (sqlc's
// :execrows); it is not called when from -> to is not declared. current
// reads the row's state now; it is called only when update affected no row.
//
// Outcomes:
//   - 1 row: FirstRun, this call made the transition;
//   - 0 rows and the row is at to, or at a state that can follow to
//     (paid -> shipped when paying): AlreadyDone;
//   - 0 rows and the row is elsewhere: a *TransitionError matching
//     sqlonce.ErrInvalidTransition, carrying from, to and the current state;
//   - 0 rows and the row still reads from: sqlonce.ErrStaleRead (retryable;
//     on MySQL under REPEATABLE READ read with LOCK IN SHARE MODE), also
//     when a cycle leads from to back to from;
//   - 0 rows and the row is gone (current returns an error matching
//     sql.ErrNoRows, pgx.ErrNoRows or sqlonce.ErrNotFound):
//     sqlonce.ErrNotFound;
//   - more than 1 row: sqlonce.ErrTooManyRows;
//   - an undeclared from -> to: a *TransitionError matching
//     sqlonce.ErrInvalidTransition, before update runs.
//
// Errors from update and current pass through, wrapped.
//
// In a machine with cycles (failed -> pending -> failed) "past" is only
// reachability: a row that went round the cycle again after this call's
// transition also counts as AlreadyDone, except a row back at from, which
// reads as ErrStaleRead: a retry then makes the transition again. As with
// optimistic versions, states alone cannot tell this call's earlier
// transition from another's; combine with dedupe where that matters.
func (m *Machine[S]) Transition(ctx context.Context, from, to S, update func(ctx context.Context) (int64, error), current func(ctx context.Context) (S, error)) (res sqlonce.Result, err error) {
	op := obs.Start(obs.FromContext(ctx), "statemachine", "Transition", "", "")
	if op.On() {
		op.Scope(fmt.Sprintf("%v->%v", from, to))
	}
	defer func() { err = op.End(ctx, res, err) }()
	return m.transition(ctx, from, to, update, current, &op)
}

func (m *Machine[S]) transition(ctx context.Context, from, to S, update func(ctx context.Context) (int64, error), current func(ctx context.Context) (S, error), op *obs.Op) (sqlonce.Result, error) {
	if !m.Allows(from, to) {
		return sqlonce.Result{}, &TransitionError[S]{From: from, To: to, Undeclared: true}
	}
	if update == nil || current == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil update or current", sqlonce.ErrInvalidArgument)
	}
	op.WorkStart()
	rows, err := update(ctx)
	op.WorkEnd()
	if err != nil {
		return sqlonce.Result{}, err
	}
	switch {
	case rows == 1:
		return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
	case rows > 1:
		return sqlonce.Result{}, fmt.Errorf("%w: transition %v -> %v affected %d rows", sqlonce.ErrTooManyRows, from, to, rows)
	case rows < 0:
		return sqlonce.Result{}, fmt.Errorf("%w: affected rows %d is negative", sqlonce.ErrInvalidArgument, rows)
	}
	cur, err := current(ctx)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) || errors.Is(err, sqlonce.ErrNotFound) { // pgx.ErrNoRows matches sql.ErrNoRows
			return sqlonce.Result{}, fmt.Errorf("%w: %w", sqlonce.ErrNotFound, err)
		}
		return sqlonce.Result{}, fmt.Errorf("sqlonce/statemachine: read current state: %w", err)
	}
	switch {
	case cur == from:
		// Checked first: in a machine with a cycle from also follows to,
		// but a read that disagrees with the UPDATE says nothing about
		// where the row is.
		return sqlonce.Result{}, fmt.Errorf("%w: transition %v -> %v matched no row but the state still reads %v", sqlonce.ErrStaleRead, from, to, cur)
	case cur == to || m.Reaches(to, cur):
		return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
	}
	return sqlonce.Result{}, &TransitionError[S]{From: from, To: to, Current: cur, HasCurrent: true}
}

// TransitionError is the error for a transition that cannot be made. It
// matches sqlonce.ErrInvalidTransition with errors.Is; get the states with
// errors.As.
type TransitionError[S comparable] struct {
	From, To S
	// Current is the row's state when HasCurrent is true.
	Current    S
	HasCurrent bool
	// Undeclared is true when the machine does not declare From -> To; no
	// SQL ran.
	Undeclared bool
}

func (e *TransitionError[S]) Error() string {
	if e.Undeclared {
		return fmt.Sprintf("%v: %v -> %v is not a declared transition", sqlonce.ErrInvalidTransition, e.From, e.To)
	}
	return fmt.Sprintf("%v: %v -> %v, but the row is at %v", sqlonce.ErrInvalidTransition, e.From, e.To, e.Current)
}

// Unwrap returns sqlonce.ErrInvalidTransition.
func (e *TransitionError[S]) Unwrap() error { return sqlonce.ErrInvalidTransition }

// Edge returns the transition from -> to, for New:
//
//	statemachine.New(statemachine.Edge(Created, Paid), statemachine.Edge(Paid, Shipped))
func Edge[S comparable](from, to S) Transition[S] { return Transition[S]{From: from, To: to} }
