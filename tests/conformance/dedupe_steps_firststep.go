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
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

var errFirstStep = errors.New("first step failed")

// apartEngine refuses to start a step key with a first step in one
// transaction, as mysqldriver does through vtgate: its StepStart answers
// driver.ErrNoRun in the first transaction it is called in for a key.
// Only there: the claim apart that follows runs in autocommit where the
// engine has it (vtgate does), but in a transaction of its own where the
// engine's Autocommit answers driver.ErrNoRun (lib/pq, PgBouncer in
// transaction mode through lib/pq, a Galera node without
// wsrep_sync_wait's bit 2), and must be let through there.
type apartEngine[TTx any] struct {
	driver.Engine[TTx]
	refused *atomic.Int32
	seen    *sync.Map // keys whose StepStart was refused once
}

type inTxKey struct{}

func (e apartEngine[TTx]) InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	return e.Engine.InTx(ctx, func(ctx context.Context, tx TTx) error { return fn(context.WithValue(ctx, inTxKey{}, true), tx) })
}

func (e apartEngine[TTx]) StepStart(ctx context.Context, tx TTx, k driver.Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (int64, bool, error) {
	if ctx.Value(inTxKey{}) != nil {
		if _, again := e.seen.LoadOrStore(k, true); !again {
			e.refused.Add(1)
			return 0, false, driver.ErrNoRun
		}
	}
	return e.Engine.StepStart(ctx, tx, k, fingerprint, recovery, lease, ttl, now)
}

type apartDriver[TTx any] struct{ e apartEngine[TTx] }

func (d apartDriver[TTx]) Engine() driver.Engine[TTx] { return d.e }

// runStepsFirstStep: RunSteps claims a key whose operation starts with a
// database step in that step's transaction. A failed first step commits
// nothing of it; the key is left as a run stopped at its first step, free
// at once; racing first runs commit the step once.
func runStepsFirstStep[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const lease = time.Minute
	op := func(db harness.DB[TTx], fail *atomic.Int32, steps int) *dedupe.Operation[TTx] {
		o := &dedupe.Operation[TTx]{Name: "first", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				if err := db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/write", 1); err != nil {
					return nil, err
				}
				if fail != nil && fail.Add(-1) >= 0 {
					return nil, errFirstStep
				}
				return []byte(fmt.Sprintf("w%d", st.Attempt)), nil
			}},
		}}
		if steps == 2 {
			o.Steps = append(o.Steps, dedupe.Step[TTx]{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				w, _ := st.Result("write")
				return []byte("ok " + string(w)), nil
			}})
		}
		return o
	}
	ledger := func(t *testing.T, ctx context.Context, db harness.DB[TTx], key string, want int64) {
		t.Helper()
		n, err := db.Pool().LedgerCountByRef(ctx, key+"/write")
		must(t, err)
		if n != want {
			t.Fatalf("key %s: %d ledger rows, want %d", key, n, want)
		}
	}
	t.Run("FirstStepFails", func(t *testing.T) {
		for _, steps := range []int{1, 2} {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			var fail atomic.Int32
			fail.Store(1)
			o := op(db, &fail, steps)
			key := fmt.Sprintf("fail-%d", steps)
			req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
			_, err = s.RunSteps(ctx, req, []byte(key), o)
			wantErr(t, "failed first step", err, errFirstStep)
			ledger(t, ctx, db, key, 0) // the step's write rolled back
			info, err := s.InspectSteps(ctx, req.Scope, req.Key)
			must(t, err)
			if info.State != dedupe.KeyLapsed || info.Operation != "first" || len(info.Done) != 0 || info.Attempts != 1 {
				t.Fatalf("after a failed first step: %+v, want a released key at its first step", info)
			}
			res, err := s.RunSteps(ctx, req, []byte(key), o)
			want := "w2"
			if steps == 2 {
				want = "ok w2"
			}
			wantOutcome(t, "retry", res, err, sqlonce.FirstRun, &want)
			ledger(t, ctx, db, key, 1)
			res, err = s.RunSteps(ctx, req, []byte(key), o)
			wantOutcome(t, "replay", res, err, sqlonce.AlreadyDone, &want)
		}
	})
	// The first step's error is kept with the key as a later step's is:
	// the resumer's giving up names it.
	t.Run("FirstStepFailsThenGivenUp", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		var fail atomic.Int32
		fail.Store(1 << 20)
		o := op(db, &fail, 2)
		req := dedupe.Request{Scope: "steps", Key: "doomed-first"}
		_, err = s.RunSteps(ctx, req, []byte("doomed-first"), o)
		wantErr(t, "first run", err, errFirstStep)
		done, failed, err := s.ResumeStuck(ctx, 1, o)
		if done != 0 || failed != 1 || err != nil {
			t.Fatalf("resumer: %d done, %d failed, %v", done, failed, err)
		}
		info, err := s.InspectSteps(ctx, req.Scope, req.Key)
		must(t, err)
		if info.State != dedupe.KeyDone || info.Failed != errFirstStep.Error() || info.FailedStep != "write" {
			t.Fatalf("given up: %+v, want failed at step write with its error", info)
		}
		_, err = s.RunSteps(ctx, req, []byte("doomed-first"), o)
		wantErr(t, "after giving up", err, dedupe.ErrOperationFailed)
		ledger(t, ctx, db, "doomed-first", 0)
	})
	// A driver that starts keys in autocommit only: the claim commits
	// apart, before the first step, as it did before.
	t.Run("StartApart", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		var refused atomic.Int32
		s, err := dedupe.New(apartDriver[TTx]{apartEngine[TTx]{Engine: db.Driver().Engine(), refused: &refused, seen: new(sync.Map)}})
		must(t, err)
		var fail atomic.Int32
		fail.Store(1)
		o := op(db, &fail, 2)
		req := dedupe.Request{Scope: "steps", Key: "apart"}
		_, err = s.RunSteps(ctx, req, []byte("apart"), o)
		wantErr(t, "failed first step", err, errFirstStep)
		res, err := s.RunSteps(ctx, req, []byte("apart"), o)
		want := "ok w2"
		wantOutcome(t, "retry", res, err, sqlonce.FirstRun, &want)
		ledger(t, ctx, db, "apart", 1)
		if n := refused.Load(); n != 1 {
			t.Fatalf("StepStart refused %d times in a transaction, want once (the first step's)", n)
		}
	})
	// Each its own case, its own database: through vtgate a case has at
	// most as many as the keyspace has shards.
	t.Run("RacingFirstRuns", func(t *testing.T) {
		const workers = 8
		for _, steps := range []int{1, 2} {
			for _, await := range []bool{false, true} {
				t.Run(fmt.Sprintf("Steps%dAwait%v", steps, await), func(t *testing.T) {
					ctx := ctxT(t)
					db := f(t, workers+2)
					var opts []dedupe.Option
					if await {
						opts = append(opts, dedupe.WithAwaitResult())
					}
					s, err := dedupe.New(db.Driver(), opts...)
					must(t, err)
					o := op(db, nil, steps)
					key := fmt.Sprintf("race-%d-%v", steps, await)
					req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
					var first, done, inProgress atomic.Int32
					var wg sync.WaitGroup
					errs := make(chan error, workers)
					start := make(chan struct{})
					for range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							res, err := s.RunSteps(ctx, req, []byte(key), o)
							switch {
							case errors.Is(err, sqlonce.ErrInProgress) && !await:
								inProgress.Add(1)
							case err != nil:
								errs <- err
							case res.FirstRun():
								first.Add(1)
							default:
								done.Add(1)
							}
						}()
					}
					close(start)
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Fatalf("steps %d, await %v: %v", steps, await, err)
					}
					if first.Load() != 1 || first.Load()+done.Load()+inProgress.Load() != workers {
						t.Fatalf("steps %d, await %v: %d first runs, %d done, %d in progress", steps, await, first.Load(), done.Load(), inProgress.Load())
					}
					ledger(t, ctx, db, key, 1)
				})
			}
		}
	})
}
