package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/token"
)

// TestPgBouncerPQText: lib/pq as a program opens it by default (no
// binary_parameters=yes) through PgBouncer in transaction pooling mode,
// 32 goroutines racing. lib/pq parses a statement with arguments in one
// round trip and binds it in another; outside a transaction the bouncer
// may hand the two to different server connections. sqlonce's own
// statements must therefore never run outside a transaction there:
// Store.Run's read, a lease's Claim, Complete, Release, and token.Issue.
// Before the driver knew lib/pq they failed with 26000 ("unnamed prepared
// statement does not exist") and 08P01 (a Bind meeting another client's
// statement).
func TestPgBouncerPQText(t *testing.T) {
	const rounds, keys = 4, 8
	db := harness.PgBouncerPQText()(t, Racers+4)
	ctx := ctxT(t)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	tokens, err := token.New(db.Driver())
	must(t, err)
	var firstRuns, leaseRuns, consumed [rounds]atomic.Int64
	for round := range rounds {
		noErrors(t, race(Racers, func(i int) error {
			k := fmt.Sprintf("r%d-%d", round, i%keys)
			// Store.Run: its read of the key, then the transaction.
			res, err := store.Run(ctx, dedupe.Request{Scope: "pq", Key: "run-" + k}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				return []byte("ok"), db.Tx(tx).LedgerInsert(ctx, "run-"+k, 1)
			})
			if err != nil {
				return fmt.Errorf("Run %s: %w", k, err)
			}
			if res.FirstRun() {
				firstRuns[round].Add(1)
			}
			// A lease: Claim, the work outside, Complete; or Release when
			// the work fails (it does not here).
			for {
				l, res, err := store.Claim(ctx, dedupe.Request{Scope: "pq", Key: "lease-" + k}, time.Minute)
				switch {
				case errors.Is(err, sqlonce.ErrInProgress):
					select { // the holder completes it: wait, as long as ctx lets
					case <-ctx.Done():
						return fmt.Errorf("lease %s: still in progress: %w", k, ctx.Err())
					case <-time.After(5 * time.Millisecond):
					}
					continue
				case err != nil:
					return fmt.Errorf("Claim %s: %w", k, err)
				case res.AlreadyDone():
				default:
					if err := harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
						return db.Tx(tx).LedgerInsert(ctx, "lease-"+k, 1)
					}); err != nil {
						_ = store.Release(context.WithoutCancel(ctx), l)
						return fmt.Errorf("lease work %s: %w", k, err)
					}
					if err := store.Complete(ctx, l, []byte("done")); err != nil {
						return fmt.Errorf("Complete %s: %w", k, err)
					}
					leaseRuns[round].Add(1)
				}
				break
			}
			// A lease released: claimed and released by one racer alone.
			l, _, err := store.Claim(ctx, dedupe.Request{Scope: "pq-release", Key: fmt.Sprintf("r%d-%d", round, i)}, time.Minute)
			if err != nil {
				return fmt.Errorf("Claim to release %d: %w", i, err)
			}
			if err := store.Release(ctx, l); err != nil {
				return fmt.Errorf("Release %d: %w", i, err)
			}
			// token.Issue, then Consume in a transaction of the caller's.
			tok, err := tokens.Issue(ctx, "pq:"+k)
			if err != nil {
				return fmt.Errorf("Issue %s: %w", k, err)
			}
			return harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
				res, err := tokens.Consume(ctx, tx, "pq:"+k, tok)
				if err == nil && res.FirstRun() {
					consumed[round].Add(1)
				}
				return err
			})
		}))
		if t.Failed() {
			t.FailNow()
		}
	}
	for round := range rounds {
		if firstRuns[round].Load() != keys || leaseRuns[round].Load() != keys || consumed[round].Load() != int64(Racers) {
			t.Fatalf("round %d: %d first runs, %d lease runs (want %d each), %d tokens consumed (want %d)", round, firstRuns[round].Load(), leaseRuns[round].Load(), keys, consumed[round].Load(), Racers)
		}
		for i := range keys {
			k := fmt.Sprintf("r%d-%d", round, i)
			for _, ref := range []string{"run-" + k, "lease-" + k} {
				// Counted in a transaction: the test's own statements
				// with arguments need one through lib/pq too.
				var n int64
				must(t, harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) (err error) {
					n, err = db.Tx(tx).LedgerCountByRef(ctx, ref)
					return err
				}))
				if n != 1 {
					t.Fatalf("%s: %d ledger rows, want 1", ref, n)
				}
			}
		}
	}
}
