package conformance

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// stepsRedrive: an operation whose step 2 of 3 fails is given up by the
// resumer with where, why, after how many attempts and when; Store.Redrive
// turns it back into a stopped operation, once among 8 racing calls, and
// the next run (the resumer's or a retry's) goes on from step 2 with a
// fresh count of attempts: step 1's write stays once, step 3's happens
// once. A key done, running or stopped is refused.
func stepsRedrive[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const lease = time.Minute
	for _, by := range []string{"Resumer", "Retry"} {
		t.Run("By"+by, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			var calls atomic.Int64
			var fixed atomic.Bool
			op := &dedupe.Operation[TTx]{Name: "redrive", Lease: lease, Steps: []dedupe.Step[TTx]{
				{Name: "first", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
					return []byte("1"), db.Tx(tx).LedgerInsert(ctx, "redrive/first", 1)
				}},
				{Name: "second", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
					calls.Add(1)
					if !fixed.Load() {
						return nil, errInjected
					}
					return []byte("2"), nil
				}},
				{Name: "third", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
					return []byte("done:" + string(st.Input)), db.Tx(tx).LedgerInsert(ctx, "redrive/third", 1)
				}},
			}}
			t0 := clockBase()
			req := dedupe.Request{Scope: "steps", Key: "redrive-1"}
			_, err = s.RunSteps(at(ctx, t0, 0), req, []byte("in"), op)
			wantErr(t, "first run", err, errInjected)
			done, failed, err := s.ResumeStuck(at(ctx, t0, time.Second), 1, op)
			if done != 0 || failed != 1 || err != nil {
				t.Fatalf("resumer: %d done, %d given up, %v; want 1 given up", done, failed, err)
			}
			info, err := s.InspectSteps(at(ctx, t0, 2*time.Second), req.Scope, req.Key)
			must(t, err)
			if info.State != dedupe.KeyDone || info.FailedStep != "second" || info.Attempts != 1 || info.Failed != errInjected.Error() ||
				!info.FailedAt.Equal(t0.Add(time.Second)) || info.Operation != "redrive" {
				t.Fatalf("inspect the given-up operation: %+v", info)
			}

			// 8 racing redrives: one re-drives it, the others are refused.
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = s.Redrive(at(ctx, t0, 2*time.Second), req.Scope, req.Key)
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, dedupe.ErrNotRedrivable):
					t.Fatalf("racing redrive: %v", err)
				}
			}
			if won != 1 {
				t.Fatalf("%d racing redrives won, want 1: %v", won, errs)
			}
			// Stopped now: from its recovery point, with a fresh count.
			info, err = s.InspectSteps(at(ctx, t0, 2*time.Second), req.Scope, req.Key)
			must(t, err)
			if info.State != dedupe.KeyLapsed || !slices.Equal(info.Done, []string{"first"}) || info.Attempts != 0 || info.Failed != "" || info.FailedStep != "" {
				t.Fatalf("inspect the re-driven operation: %+v", info)
			}
			wantErr(t, "redrive of a stopped key", s.Redrive(at(ctx, t0, 2*time.Second), req.Scope, req.Key), dedupe.ErrNotRedrivable)

			fixed.Store(true)
			var res sqlonce.Result
			if by == "Resumer" {
				// maxAttempts 1 again: the count started afresh.
				done, failed, err := s.ResumeStuck(at(ctx, t0, 3*time.Second), 1, op)
				if done != 1 || failed != 0 || err != nil {
					t.Fatalf("resumer after redrive: %d done, %d given up, %v", done, failed, err)
				}
				res, err = s.RunSteps(at(ctx, t0, 4*time.Second), req, []byte("in"), op)
				if err != nil || !res.AlreadyDone() {
					t.Fatalf("repeat after the resumer finished: %+v, %v", res, err)
				}
			} else {
				res, err = s.RunSteps(at(ctx, t0, 3*time.Second), req, []byte("in"), op)
				if err != nil || res.AlreadyDone() {
					t.Fatalf("retry after redrive: %+v, %v", res, err)
				}
			}
			if string(res.Response) != "done:in" {
				t.Fatalf("response %q, want done:in", res.Response)
			}
			for ref, want := range map[string]int64{"redrive/first": 1, "redrive/third": 1} {
				n, err := db.Pool().LedgerCountByRef(ctx, ref)
				must(t, err)
				if n != want {
					t.Fatalf("%s: %d rows, want %d", ref, n, want)
				}
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("step 2 called %d times, want 2 (failed, then after the redrive)", n)
			}
			// Done: refused; no such key: not found.
			wantErr(t, "redrive of a done key", s.Redrive(at(ctx, t0, 5*time.Second), req.Scope, req.Key), dedupe.ErrNotRedrivable)
			wantErr(t, "redrive of no key", s.Redrive(ctx, req.Scope, "nope"), sqlonce.ErrNotFound)
			wantErr(t, "redrive of a bad key", s.Redrive(ctx, req.Scope, ""), sqlonce.ErrInvalidKey)
		})
	}

	t.Run("RunningRefused", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		in, out := make(chan struct{}), make(chan struct{})
		op := &dedupe.Operation[TTx]{Name: "slow", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "wait", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				close(in)
				<-out
				return []byte("ok"), nil
			}},
		}}
		req := dedupe.Request{Scope: "steps", Key: "running"}
		ran := make(chan error, 1)
		go func() {
			_, err := s.RunSteps(ctx, req, nil, op)
			ran <- err
		}()
		<-in
		err = s.Redrive(ctx, req.Scope, req.Key)
		close(out)
		wantErr(t, "redrive of a running key", err, dedupe.ErrNotRedrivable)
		must(t, <-ran)
	})
}
