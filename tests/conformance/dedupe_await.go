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

// awaitWaiters is how many repeats race a first run in the
// WithAwaitResult cases.
const awaitWaiters = 8

// runWaiters runs call from awaitWaiters goroutines at once and returns
// their results.
func runWaiters(call func() (sqlonce.Result, error)) []drResult {
	out := make([]drResult, awaitWaiters)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := call()
			out[i] = drResult{res, err}
		}()
	}
	wg.Wait()
	return out
}

// wantAnswers fails unless every result is AlreadyDone with resp, but for
// firsts of them FirstRun with resp.
func wantAnswers(t testing.TB, what string, rs []drResult, firsts int, resp string) {
	t.Helper()
	n := 0
	for i, r := range rs {
		if r.err != nil {
			t.Fatalf("%s: waiter %d: %v", what, i, r.err)
		}
		if string(r.res.Response) != resp {
			t.Fatalf("%s: waiter %d answered %q, want %q", what, i, r.res.Response, resp)
		}
		if r.res.FirstRun() {
			n++
		}
	}
	if n != firsts {
		t.Fatalf("%s: %d waiters ran the work, want %d", what, n, firsts)
	}
}

// awaitOp is an operation of an outside step that, in the first attempt
// only, blocks until gate closes, then a database step writing one ledger
// row under "<input>/write".
func awaitOp[TTx any](db harness.DB[TTx], lease time.Duration, gate <-chan struct{}, started chan<- struct{}) *dedupe.Operation[TTx] {
	return &dedupe.Operation[TTx]{Name: "await", Lease: lease, Steps: []dedupe.Step[TTx]{
		{Name: "slow", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			if st.Attempt == 1 {
				close(started)
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte("slow"), nil
		}},
		{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			if err := db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/write", 1); err != nil {
				return nil, err
			}
			return []byte("done-" + string(st.Input)), nil
		}},
	}}
}

func runDedupeAwait[TTx any](t *testing.T, f harness.Factory[TTx]) {
	// Repeats racing a slow first Run in its transaction: they wait on
	// the key's lock (by default) or ask again (WithNoWait), and all get
	// the first's answer.
	for _, mode := range []string{"Lock", "NoWait"} {
		t.Run("RunRacingSlowFirst"+mode, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, awaitWaiters+4)
			opts := []dedupe.Option{dedupe.WithAwaitResult()}
			if mode == "NoWait" {
				opts = append(opts, dedupe.WithNoWait())
			}
			s, err := dedupe.New(db.Driver(), opts...)
			must(t, err)
			req := dedupe.Request{Scope: "await", Key: "slow-run-" + mode}
			release, done := drHold(t, ctx, db, s, req, "first")
			// A repeat's fn may run (Run may run fn before it meets the
			// key, on some drivers); only one run commits.
			go func() { time.Sleep(200 * time.Millisecond); release() }()
			rs := runWaiters(func() (sqlonce.Result, error) {
				return s.Run(ctx, req, drWork(db, req.Key, []byte("repeat"), nil))
			})
			// On a driver whose Run runs fn before it meets the key, a
			// repeat may commit first: one run wins, all get its answer.
			all := append(rs, <-done)
			winner := "first"
			for _, r := range all {
				if r.err == nil && r.res.FirstRun() {
					winner = string(r.res.Response)
				}
			}
			wantAnswers(t, "runs", all, 1, winner)
			wantLedger(t, ctx, db, req.Key, 1)
		})
	}

	// Repeats of a key leased by Claim wait for Complete's answer.
	t.Run("RunAwaitsLease", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, awaitWaiters+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		req := dedupe.Request{Scope: "await", Key: "leased"}
		l, res, err := s.Claim(ctx, req, time.Minute)
		if err != nil || !res.FirstRun() {
			t.Fatalf("claim: %v, %v", res, err)
		}
		go func() {
			time.Sleep(200 * time.Millisecond)
			if err := s.Complete(context.WithoutCancel(ctx), l, []byte("completed")); err != nil {
				t.Errorf("complete: %v", err)
			}
		}()
		var ran atomic.Int64
		rs := runWaiters(func() (sqlonce.Result, error) {
			return s.Run(ctx, req, drNever[TTx](&ran))
		})
		wantAnswers(t, "repeats", rs, 0, "completed")
		wantNoCalls(t, "repeats", &ran)
	})

	// The holder of a Claim dies: its lease lapses on the database's
	// clock, one waiting Run takes the key over and runs the work, the
	// others get its answer.
	t.Run("RunHolderDies", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, awaitWaiters+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		req := dedupe.Request{Scope: "await", Key: "holder-dies"}
		if _, res, err := s.Claim(ctx, req, 300*time.Millisecond); err != nil || !res.FirstRun() {
			t.Fatalf("claim: %v, %v", res, err)
		}
		rs := runWaiters(func() (sqlonce.Result, error) {
			return s.Run(ctx, req, drWork(db, req.Key, []byte("taken-over"), nil))
		})
		wantAnswers(t, "waiters", rs, 1, "taken-over")
		wantLedger(t, ctx, db, req.Key, 1)
	})

	// A ctx that ends while the repeat waits: both its error and
	// ErrInProgress match.
	t.Run("DeadlineWhileWaiting", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		req := dedupe.Request{Scope: "await", Key: "deadline-run"}
		if _, res, err := s.Claim(ctx, req, time.Minute); err != nil || !res.FirstRun() {
			t.Fatalf("claim: %v, %v", res, err)
		}
		var ran atomic.Int64
		// Long enough for Run's claim to find the key leased before the
		// deadline, however loaded the machine (at 100ms the deadline
		// once ended the claim's statement itself through vtgate: then
		// Run cannot know the key is in progress).
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err = s.Run(short, req, drNever[TTx](&ran))
		cancel()
		wantErr(t, "Run", err, context.DeadlineExceeded)
		wantErr(t, "Run", err, sqlonce.ErrInProgress)
		wantNoCalls(t, "Run", &ran)

		gate, started := make(chan struct{}), make(chan struct{})
		defer close(gate)
		op := awaitOp(db, time.Minute, gate, started)
		sreq := dedupe.Request{Scope: "await", Key: "deadline-steps"}
		go func() { _, _ = s.RunSteps(ctx, sreq, []byte(sreq.Key), op) }()
		<-started
		short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = s.RunSteps(short, sreq, []byte(sreq.Key), op)
		cancel()
		wantErr(t, "RunSteps", err, context.DeadlineExceeded)
		wantErr(t, "RunSteps", err, sqlonce.ErrInProgress)
	})

	// Repeats racing a slow first run of steps all get its answer.
	t.Run("StepsRacingSlowFirst", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, awaitWaiters+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		gate, started := make(chan struct{}), make(chan struct{})
		op := awaitOp(db, time.Minute, gate, started)
		req := dedupe.Request{Scope: "await", Key: "slow-steps"}
		done := make(chan drResult, 1)
		go func() {
			res, err := s.RunSteps(ctx, req, []byte(req.Key), op)
			done <- drResult{res, err}
		}()
		<-started
		go func() { time.Sleep(200 * time.Millisecond); close(gate) }()
		rs := runWaiters(func() (sqlonce.Result, error) {
			return s.RunSteps(ctx, req, []byte(req.Key), op)
		})
		first := <-done
		if first.err != nil || !first.res.FirstRun() {
			t.Fatalf("first run: %v, %v", first.res, first.err)
		}
		wantAnswers(t, "repeats", rs, 0, "done-"+req.Key)
		wantLedger(t, ctx, db, req.Key+"/write", 1)
	})

	// The first run of steps hangs past its lease: one waiter resumes it
	// and finishes it, the others get its answer, and the hung run, once
	// it wakes, finds its lease lost.
	t.Run("StepsHolderDies", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, awaitWaiters+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		gate, started := make(chan struct{}), make(chan struct{})
		op := awaitOp(db, 300*time.Millisecond, gate, started)
		req := dedupe.Request{Scope: "await", Key: "steps-holder-dies"}
		done := make(chan drResult, 1)
		go func() {
			res, err := s.RunSteps(ctx, req, []byte(req.Key), op)
			done <- drResult{res, err}
		}()
		<-started
		rs := runWaiters(func() (sqlonce.Result, error) {
			return s.RunSteps(ctx, req, []byte(req.Key), op)
		})
		close(gate)
		wantAnswers(t, "waiters", rs, 1, "done-"+req.Key)
		first := <-done
		wantErr(t, "the hung run", first.err, sqlonce.ErrLeaseLost)
		wantLedger(t, ctx, db, req.Key+"/write", 1)
	})

	// Waiting repeats race the resumer finishing stuck operations: each
	// operation's effects happen once, and no repeat answers
	// ErrInProgress.
	t.Run("StepsRaceResumer", func(t *testing.T) {
		ctx := ctxT(t)
		const keys, resumers = 4, 2
		const lease = time.Minute
		db := f(t, awaitWaiters+resumers+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithAwaitResult())
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		for k := range keys {
			key := fmt.Sprintf("await-stuck-%d", k)
			runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
			faults.mu.Lock()
			faults.fault, faults.cancel = &stepFault{step: "charge", inside: true, mode: "cancel"}, cancel
			faults.mu.Unlock()
			_, err := s.RunSteps(runCtx, dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}, []byte(key), op)
			cancel()
			wantErr(t, "stopped run", err, context.Canceled)
		}
		later := at(ctx, t0, 2*lease)
		var wg sync.WaitGroup
		var finished, first atomic.Int64
		errs := make(chan error, awaitWaiters*keys+resumers)
		answers := sync.Map{}
		for range resumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					done, _, err := s.ResumeStuck(later, 3, op)
					if err != nil && !errors.Is(err, sqlonce.ErrLeaseLost) {
						errs <- fmt.Errorf("resumer: %w", err)
						return
					}
					finished.Add(int64(done))
				}
			}()
		}
		for w := range awaitWaiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					key := fmt.Sprintf("await-stuck-%d", (k+w)%keys)
					req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
					res, err := s.RunSteps(later, req, []byte(key), op)
					if errors.Is(err, sqlonce.ErrLeaseLost) {
						// Its takeover was taken over in turn: ask again.
						res, err = s.RunSteps(later, req, []byte(key), op)
					}
					if err != nil {
						errs <- fmt.Errorf("key %s: %w", key, err)
						return
					}
					if res.FirstRun() {
						first.Add(1)
					}
					if prev, loaded := answers.LoadOrStore(key, string(res.Response)); loaded && prev != string(res.Response) {
						errs <- fmt.Errorf("key %s answered %q and %q", key, prev, res.Response)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := first.Load() + finished.Load(); n != keys {
			t.Fatalf("%d resumed by waiting repeats, %d by resumers, want %d in all", first.Load(), finished.Load(), keys)
		}
		for k := range keys {
			wantLedgerOnce(t, ctx, db, fmt.Sprintf("await-stuck-%d", k))
		}
		svc.effectsOnce(t, 2*keys)
		t.Logf("%d keys: %d finished by waiting repeats, %d by resumers", keys, first.Load(), finished.Load())
	})
}
