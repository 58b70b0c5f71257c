package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runInbox checks the inbox without a broker: deliveries are calls. The
// broker itself is exercised in tests/broker.
func runInbox[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("InspectForget", func(t *testing.T) { inboxInspectForget(t, f) })
	t.Run("RedeliveryAfterFailureAndAfterCommit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "ledger-writer")
		must(t, err)
		failed := errors.New("fn failed")
		deliver := func(fail bool) (sqlonce.Result, error) {
			return in.Handle(ctx, "msg-1", func(ctx context.Context, tx TTx) error {
				if err := db.Tx(tx).LedgerInsert(ctx, "msg-1", 1); err != nil {
					return err
				}
				if fail {
					return failed
				}
				return nil
			})
		}
		if _, err := deliver(true); !errors.Is(err, failed) {
			t.Fatalf("failing delivery: %v", err)
		}
		ddLedger(t, db, "msg-1", 0)
		ddKeys(t, db, 0)
		res, err := deliver(false)
		wantOutcome(t, "redelivery", res, err, sqlonce.FirstRun, nil)
		res, err = deliver(false)
		wantOutcome(t, "after a lost ack", res, err, sqlonce.AlreadyDone, nil)
		ddLedger(t, db, "msg-1", 1)

		// Another consumer of the same message applies it for itself.
		other, err := inbox.New(db.Driver(), "emailer")
		must(t, err)
		res, err = other.Handle(ctx, "msg-1", func(ctx context.Context, tx TTx) error {
			return db.Tx(tx).LedgerInsert(ctx, "email-msg-1", 1)
		})
		wantOutcome(t, "other consumer", res, err, sqlonce.FirstRun, nil)
		ddLedger(t, db, "email-msg-1", 1)
	})

	t.Run("ConcurrentRedeliveries", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		in, err := inbox.New(db.Driver(), "ledger-writer")
		must(t, err)
		const msgs = 4
		var c counter
		errs := race(Racers, func(i int) error {
			id := fmt.Sprintf("msg-%d", i%msgs)
			res, err := in.Handle(ctx, id, func(ctx context.Context, tx TTx) error {
				return db.Tx(tx).LedgerInsert(ctx, id, 1)
			})
			c.add(res)
			return err
		})
		noErrors(t, errs)
		if c.first.Load() != msgs || c.done.Load() != int64(Racers)-msgs {
			t.Fatalf("%v, want first=%d done=%d", &c, msgs, Racers-msgs)
		}
		per, err := db.Pool().LedgerCountPerRef(ctx)
		must(t, err)
		for i := range msgs {
			if n := per[fmt.Sprintf("msg-%d", i)]; n != 1 {
				t.Fatalf("msg-%d applied %d times", i, n)
			}
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		if _, err := inbox.New[TTx](nil, "c"); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil driver: %v", err)
		}
		if _, err := inbox.New(db.Driver(), ""); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("empty consumer: %v", err)
		}
		in, err := inbox.New(db.Driver(), "c")
		must(t, err)
		if _, err := in.Handle(ctx, "", func(context.Context, TTx) error { return nil }); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("empty id: %v", err)
		}
		if _, err := in.Handle(ctx, "m", nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil fn: %v", err)
		}
	})
}
