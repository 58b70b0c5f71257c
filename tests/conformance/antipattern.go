package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// checkGap is the time between the check and the insert in the
// select-then-insert racers. A real request spends it on its own work (a
// call to another service, a template to render); here it only makes the
// window the race needs reliably wide, so that the test can insist on
// seeing the duplicates.
const checkGap = 5 * time.Millisecond

// antiPatternRounds bounds how many rounds, each on a fresh key, the
// select-then-insert race gets to show a duplicate.
const antiPatternRounds = 5

// antiPatternRacers is how many goroutines race in the anti-pattern cases,
// also under -short: with fewer, select-then-insert can go rounds without
// writing the duplicate it must be shown writing.
const antiPatternRacers = 32

// selectThenInsert is the anti-pattern: look for the ledger row, insert it
// if absent. Nothing but the earlier read stops a second insert.
func selectThenInsert(ctx context.Context, b harness.Biz, ref string) (inserted bool, err error) {
	exists, err := b.LedgerExistsByRef(ctx, ref)
	if err != nil || exists {
		return false, err
	}
	time.Sleep(checkGap)
	return true, b.LedgerInsert(ctx, ref, 1)
}

func runAntiPattern[TTx any](t *testing.T, f harness.Factory[TTx]) {
	// The levels applications run at: READ COMMITTED, and the server's
	// default (READ COMMITTED on PostgreSQL, REPEATABLE READ on MySQL).
	for _, iso := range []harness.Isolation{harness.ReadCommitted, harness.Default} {
		name := string(iso)
		if iso == harness.Default {
			name = "server default"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, antiPatternRacers+4)
			warm(t, db, antiPatternRacers+4)

			t.Run("SelectThenInsert", func(t *testing.T) {
				skipOnSQLite(t, db, sqliteNoRace)
				// The test fails if the anti-pattern stops letting
				// duplicates through: that is what shows the race is real,
				// and that the dedupe run below is tested against it.
				worst := int64(0)
				for round := range antiPatternRounds {
					ref := fmt.Sprintf("anti-%d", round)
					var inserted atomic.Int64
					errs := race(antiPatternRacers, func(int) error {
						return harness.WithTx(ctx, db, iso, func(tx TTx) error {
							ok, err := selectThenInsert(ctx, db.Tx(tx), ref)
							if ok && err == nil {
								inserted.Add(1)
							}
							return err
						})
					})
					noErrors(t, errs)
					n, err := db.Pool().LedgerCountByRef(ctx, ref)
					must(t, err)
					if n != inserted.Load() {
						t.Fatalf("round %d: %d rows, %d racers said they inserted", round, n, inserted.Load())
					}
					t.Logf("round %d: %d of %d racers inserted %s", round, n, antiPatternRacers, ref)
					worst = max(worst, n)
					if worst > 1 {
						break
					}
				}
				if worst <= 1 {
					t.Fatalf("select-then-insert wrote no duplicate in %d rounds of %d racers: the race this suite guards against did not happen", antiPatternRounds, antiPatternRacers)
				}
			})

			t.Run("Dedupe", func(t *testing.T) {
				// The same race, the same gap, through dedupe.Do: the
				// claim, not the read, decides.
				store, err := dedupe.New(db.Driver())
				must(t, err)
				for round := range antiPatternRounds {
					ref := fmt.Sprintf("dedupe-%d", round)
					var c counter
					errs := race(antiPatternRacers, func(int) error {
						var res sqlonce.Result
						_, err := retryTx(ctx, db, iso, func(tx TTx) error {
							b := db.Tx(tx)
							var err error
							res, err = store.Do(ctx, tx, dedupe.Request{Scope: "ledger", Key: ref}, func(ctx context.Context) error {
								time.Sleep(checkGap)
								return b.LedgerInsert(ctx, ref, 1)
							})
							return err
						})
						if err == nil {
							c.add(res)
						}
						return err
					})
					noErrors(t, errs)
					wantLedger(t, ctx, db, ref, 1)
					if c.first.Load() != 1 || c.done.Load() != antiPatternRacers-1 {
						t.Fatalf("round %d: %s, want first=1 done=%d", round, &c, antiPatternRacers-1)
					}
				}
			})
		})
	}

	t.Run("SelectThenInsertSerializable", func(t *testing.T) {
		// SERIALIZABLE makes the read part of the decision: PostgreSQL's
		// SSI and MySQL's locking reads turn the race into serialization
		// failures and deadlocks, which a retrying caller survives with one
		// row. Correct, at the price of retries for every racer.
		ctx := ctxT(t)
		db := f(t, antiPatternRacers+4)
		warm(t, db, antiPatternRacers+4)
		//
		// On MySQL every racer's read takes a shared lock on the gap where
		// the row would go, and every insert waits for the others' gap
		// locks: each deadlock rolls back one racer, which at once takes
		// the gap lock again. Retried at retryTx's short fixed pace the
		// racers livelock; they need a backoff that grows.
		var retries atomic.Int64
		errs := race(antiPatternRacers, func(int) error {
			for attempt := 0; ; attempt++ {
				err := harness.WithTx(ctx, db, harness.Serializable, func(tx TTx) error {
					_, err := selectThenInsert(ctx, db.Tx(tx), "serial")
					return err
				})
				if err == nil || !sqlonce.IsRetryable(err) || attempt >= 50 {
					return err
				}
				retries.Add(1)
				backoff := time.Millisecond << min(attempt, 7)
				time.Sleep(backoff/2 + rand.N(backoff))
			}
		})
		noErrors(t, errs)
		wantLedger(t, ctx, db, "serial", 1)
		t.Logf("%d retries for %d racers", retries.Load(), antiPatternRacers)
	})
}
