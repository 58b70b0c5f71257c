package conformance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/statemachine"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// orderStatus is an order's state, typed as a caller types it.
type orderStatus string

const (
	statusCreated   orderStatus = "created"
	statusPaid      orderStatus = "paid"
	statusShipped   orderStatus = "shipped"
	statusCancelled orderStatus = "cancelled"
)

var orderStates = statemachine.Must(statemachine.New(
	statemachine.Edge(statusCreated, statusPaid),
	statemachine.Edge(statusPaid, statusShipped),
	statemachine.Edge(statusCreated, statusCancelled),
))

// moveOrder makes from -> to on order id through orderStates, with read as
// the state read. ran, when not nil, records whether the UPDATE ran.
func moveOrder(ctx context.Context, b harness.Biz, id int64, from, to orderStatus, read func(context.Context, int64) (string, error), ran *bool) (sqlonce.Result, error) {
	return orderStates.Transition(ctx, from, to,
		func(ctx context.Context) (int64, error) {
			if ran != nil {
				*ran = true
			}
			return b.OrderSetStatus(ctx, id, string(from), string(to))
		},
		func(ctx context.Context) (orderStatus, error) {
			s, err := read(ctx, id)
			return orderStatus(s), err
		})
}

func wantStatus[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], id int64, want orderStatus) {
	t.Helper()
	s, err := db.Pool().OrderGetStatus(ctx, id)
	must(t, err)
	if orderStatus(s) != want {
		t.Fatalf("order %d is %s, want %s", id, s, want)
	}
}

func runStateMachine[TTx any](t *testing.T, f harness.Factory[TTx]) {
	// move runs one transition in a transaction of its own and commits
	// unless it failed.
	move := func(t *testing.T, ctx context.Context, db harness.DB[TTx], id int64, from, to orderStatus, ran *bool) (sqlonce.Result, error) {
		t.Helper()
		var res sqlonce.Result
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			b := db.Tx(tx)
			var err error
			res, err = moveOrder(ctx, b, id, from, to, b.OrderGetStatus, ran)
			return err
		})
		return res, err
	}

	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "s-1", 100)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			res, err := move(t, ctx, db, id, statusCreated, statusPaid, nil)
			must(t, err)
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
		}
		wantStatus(t, ctx, db, id, statusPaid)
	})

	t.Run("AlreadyPast", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "s-past", 100)
		for _, step := range [][2]orderStatus{{statusCreated, statusPaid}, {statusPaid, statusShipped}} {
			res, err := move(t, ctx, db, id, step[0], step[1], nil)
			must(t, err)
			if !res.FirstRun() {
				t.Fatalf("%s -> %s: %v", step[0], step[1], res)
			}
		}
		// A late repeat of "pay": the order has been paid and shipped since.
		res, err := move(t, ctx, db, id, statusCreated, statusPaid, nil)
		must(t, err)
		if !res.AlreadyDone() {
			t.Fatalf("got %v, want AlreadyDone", res)
		}
		wantStatus(t, ctx, db, id, statusShipped)
	})

	t.Run("OtherBranch", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "s-cancelled", 100)
		_, err := move(t, ctx, db, id, statusCreated, statusCancelled, nil)
		must(t, err)
		res, err := move(t, ctx, db, id, statusCreated, statusPaid, nil)
		te, ok := errors.AsType[*statemachine.TransitionError[orderStatus]](err)
		if !ok || !errors.Is(err, sqlonce.ErrInvalidTransition) {
			t.Fatalf("got %v, %v; want *TransitionError matching ErrInvalidTransition", res, err)
		}
		if te.From != statusCreated || te.To != statusPaid || te.Current != statusCancelled || !te.HasCurrent || te.Undeclared {
			t.Fatalf("got %+v", te)
		}
		if sqlonce.IsRetryable(err) {
			t.Fatalf("an invalid transition is retryable: %v", err)
		}
		wantStatus(t, ctx, db, id, statusCancelled)
	})

	t.Run("Undeclared", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "s-undeclared", 100)
		for _, step := range [][2]orderStatus{{statusCreated, statusPaid}, {statusPaid, statusShipped}} {
			_, err := move(t, ctx, db, id, step[0], step[1], nil)
			must(t, err)
		}
		for _, step := range [][2]orderStatus{{statusShipped, statusCreated}, {statusCreated, statusShipped}, {statusCancelled, statusCreated}} {
			ran := false
			_, err := move(t, ctx, db, id, step[0], step[1], &ran)
			te, ok := errors.AsType[*statemachine.TransitionError[orderStatus]](err)
			if !ok || !te.Undeclared || !errors.Is(err, sqlonce.ErrInvalidTransition) {
				t.Fatalf("%s -> %s: got %v, want an undeclared TransitionError", step[0], step[1], err)
			}
			if ran {
				t.Fatalf("%s -> %s: the UPDATE ran", step[0], step[1])
			}
			wantStatus(t, ctx, db, id, statusShipped)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "s-gone", 100)
		_, err := db.Pool().OrderDelete(ctx, id)
		must(t, err)
		for _, missing := range []int64{id, id + 1000} {
			_, err := move(t, ctx, db, missing, statusCreated, statusPaid, nil)
			if !errors.Is(err, sqlonce.ErrNotFound) {
				t.Fatalf("order %d: got %v, want ErrNotFound", missing, err)
			}
		}
		n, err := db.Pool().OrderCount(ctx)
		must(t, err)
		if n != 0 {
			t.Fatalf("%d orders, want 0", n)
		}
	})

	t.Run("SnapshotTrap", func(t *testing.T) {
		// A transaction has read the order as created; another pays it and
		// commits; the first then tries created -> paid. Under MySQL's
		// REPEATABLE READ the UPDATE sees paid and matches nothing while a
		// plain SELECT still sees created: ErrStaleRead. A locking read
		// sees paid: AlreadyDone. PostgreSQL's REPEATABLE READ refuses the
		// UPDATE itself (40001).
		for _, snapshot := range []bool{true, false} {
			name := "locking read"
			if snapshot {
				name = "snapshot read"
			}
			t.Run(name, func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 2)
				id := newOrder(t, ctx, db, "s-trap", 100)
				tx, err := db.Begin(ctx, harness.RepeatableRead)
				must(t, err)
				defer func() { _ = db.Rollback(ctx, tx) }()
				b := db.Tx(tx)
				s, err := b.OrderGetStatusSnapshot(ctx, id)
				must(t, err)
				if orderStatus(s) != statusCreated {
					t.Fatalf("status %s", s)
				}
				other, err := moveOrder(ctx, db.Pool(), id, statusCreated, statusPaid, db.Pool().OrderGetStatus, nil)
				must(t, err)
				if !other.FirstRun() {
					t.Fatalf("concurrent payer: %v", other)
				}
				read := b.OrderGetStatus
				if snapshot {
					read = b.OrderGetStatusSnapshot
				}
				res, err := moveOrder(ctx, b, id, statusCreated, statusPaid, read, nil)
				switch {
				case db.Dialect() == "postgres", db.Dialect() == "sqlite": // SQLite: SQLITE_BUSY_SNAPSHOT
					if err == nil || errors.Is(err, sqlonce.ErrStaleRead) || !sqlonce.IsRetryable(err) {
						t.Fatalf("got %v, %v; want the UPDATE's retryable 40001", res, err)
					}
				case snapshot:
					if !errors.Is(err, sqlonce.ErrStaleRead) || !sqlonce.IsRetryable(err) {
						t.Fatalf("got %v, %v; want ErrStaleRead", res, err)
					}
				default:
					if err != nil || !res.AlreadyDone() {
						t.Fatalf("got %v, %v; want AlreadyDone", res, err)
					}
				}
				t.Logf("%v %v", res, err)
				_ = db.Rollback(ctx, tx)
				wantStatus(t, ctx, db, id, statusPaid)
			})
		}
	})

	t.Run("Race", func(t *testing.T) {
		// Paying writes a ledger row in the same transaction: the effect
		// counted in the database.
		runLevels(t, f, Racers+4, func(t *testing.T, db harness.DB[TTx], iso harness.Isolation) {
			ctx := ctxT(t)
			id := newOrder(t, ctx, db, "s-race", 100)
			var (
				c       counter
				retries atomic.Int64
			)
			errs := race(Racers, func(int) error {
				var res sqlonce.Result
				n, err := retryTx(ctx, db, iso, func(tx TTx) error {
					b := db.Tx(tx)
					// Look at the order first, as a handler does.
					if _, err := b.OrderGetStatusSnapshot(ctx, id); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
					var err error
					res, err = moveOrder(ctx, b, id, statusCreated, statusPaid, b.OrderGetStatus, nil)
					if err != nil || !res.FirstRun() {
						return err
					}
					return b.LedgerInsert(ctx, "pay-s-race", 100)
				})
				retries.Add(int64(n))
				if err == nil {
					c.add(res)
				}
				return err
			})
			noErrors(t, errs)
			if c.first.Load() != 1 || c.done.Load() != int64(Racers)-1 {
				t.Fatalf("%s, want first=1 done=%d", &c, Racers-1)
			}
			wantStatus(t, ctx, db, id, statusPaid)
			n, err := db.Pool().LedgerCountByRef(ctx, "pay-s-race")
			must(t, err)
			if n != 1 {
				t.Fatalf("%d ledger rows, want 1", n)
			}
			t.Logf("%s: %s, %d retries", iso, &c, retries.Load())
		})
	})
}
