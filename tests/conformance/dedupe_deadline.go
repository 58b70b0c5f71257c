package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runDedupeLeaseDeadline races callers at the deadline of a lease whose
// holder never completes it. Each racer must get ErrInProgress (the lease
// holds), or take the key over (FirstRun), or, once a taker recorded its
// answer, AlreadyDone with that answer. AlreadyDone without a recorded
// answer is work nobody did reported as done: a lost request.
//
// SQLite reads its clock once per statement, and its claim took two: the
// claim saw the lease held, the read that followed saw it lapsed, and the
// key was reported as not leased, which dedupe took for done (12 of 40
// races for Do). The clock cannot be pinned here: a pinned "now" is the
// same in both statements and hides exactly that. So the case runs on the
// database's clock, with racers looping across the deadline, many rounds.
func runDedupeLeaseDeadline[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const (
		rounds = 20
		racers = 8
		lease  = 40 * time.Millisecond
	)
	type attempt func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (sqlonce.Result, error)
	modes := map[string]attempt{
		"Do": func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (sqlonce.Result, error) {
			return doRecord(ctx, db, s, req, "taken over")
		},
		"Run": func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (sqlonce.Result, error) {
			return s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
				return []byte("taken over"), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
			})
		},
		"Claim": func(ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (sqlonce.Result, error) {
			l, res, err := s.Claim(ctx, req, time.Minute)
			if err != nil || !res.FirstRun() {
				return res, err
			}
			if err := db.Pool().LedgerInsert(ctx, req.Key, 1); err != nil {
				return res, err
			}
			return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: []byte("taken over")}, s.Complete(ctx, l, []byte("taken over"))
		},
	}
	for name, try := range modes {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, racers+2)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			var lost atomic.Int64
			for round := range rounds {
				req := dedupe.Request{Scope: "deadline-" + name, Key: fmt.Sprintf("k%d", round)}
				claimed := time.Now()
				_, res, err := s.Claim(ctx, req, lease)
				wantOutcome(t, "holder's claim", res, err, sqlonce.FirstRun, nil)
				// The holder never completes. Racers loop from a little
				// before the deadline until one has taken the key over.
				time.Sleep(time.Until(claimed.Add(lease - 5*time.Millisecond)))
				var (
					taken, bad atomic.Bool
					wg         sync.WaitGroup
					mu         sync.Mutex
					errs       []error
				)
				for range racers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for deadline := time.Now().Add(5 * time.Second); !taken.Load() && time.Now().Before(deadline); {
							res, err := try(ctx, db, s, req)
							switch {
							case errors.Is(err, sqlonce.ErrInProgress) || sqlonce.IsRetryable(err):
								continue
							case err != nil:
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
								return
							case res.AlreadyDone() && string(res.Response) != "taken over":
								bad.Store(true)
								mu.Lock()
								errs = append(errs, fmt.Errorf("AlreadyDone with response %q for a lease nobody completed", res.Response))
								mu.Unlock()
							}
							taken.Store(true)
						}
					}()
				}
				wg.Wait()
				if bad.Load() {
					lost.Add(1)
				}
				for _, err := range errs {
					t.Errorf("round %d: %v", round, err)
				}
				if !taken.Load() {
					t.Fatalf("round %d: nobody took over the lapsed lease", round)
				}
				ddLedger(t, db, req.Key, 1)
			}
			if n := lost.Load(); n > 0 {
				t.Errorf("%d of %d rounds answered AlreadyDone for work nobody did", n, rounds)
			}
		})
	}
}
