package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

var (
	errTransient = errors.New("outside service: 503")
	errFatal     = errors.New("outside service: card declined")
)

// retryCall is one call of the retried step, as the step saw it.
type retryCall struct {
	attempt, try int
	at           time.Time
}

// retryScript drives the outside step "charge" of retryOp: fail returns
// the error of a call (nil: the call succeeds and makes its effect, a
// ledger row "<key>/charge" written outside any lease's transaction, as
// an outside system would). Every call is recorded.
type retryScript struct {
	mu    sync.Mutex
	calls []retryCall
	fail  func(st dedupe.StepState) error
}

func (r *retryScript) seen() []retryCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *retryScript) tries() []int {
	var n []int
	for _, c := range r.seen() {
		n = append(n, c.try)
	}
	return n
}

func (r *retryScript) reset() {
	r.mu.Lock()
	r.calls = nil
	r.mu.Unlock()
}

// retryOp is an operation of two steps: "charge", outside, retried by
// policy, then "order", a database step writing "<key>/order".
func retryOp[TTx any](db harness.DB[TTx], script *retryScript, policy dedupe.Retry) *dedupe.Operation[TTx] {
	return &dedupe.Operation[TTx]{
		Name:  "retried",
		Lease: time.Minute,
		Steps: []dedupe.Step[TTx]{
			{Name: "charge", Retry: policy, Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				script.mu.Lock()
				script.calls = append(script.calls, retryCall{attempt: st.Attempt, try: st.Try, at: time.Now()})
				fail := script.fail
				script.mu.Unlock()
				if err := fail(st); err != nil {
					return nil, err
				}
				if err := db.Pool().LedgerInsert(ctx, string(st.Input)+"/charge", 1); err != nil {
					return nil, err
				}
				return fmt.Appendf(nil, "charged on try %d", st.Try), nil
			}},
			{Name: "order", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				charge, _ := st.Result("charge")
				if err := db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/order", 1); err != nil {
					return nil, err
				}
				return fmt.Appendf(nil, "order: %s", charge), nil
			}},
		},
	}
}

// ledgerIs fails unless ref has want ledger rows.
func ledgerIs[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], ref string, want int64) {
	t.Helper()
	n, err := db.Pool().LedgerCountByRef(ctx, ref)
	must(t, err)
	if n != want {
		t.Fatalf("ledger %s: %d rows, want %d", ref, n, want)
	}
}

// runDedupeStepsRetry is Step.Retry: an outside step retried in place
// within RunSteps' run and the resumer's, by its policy.
func runDedupeStepsRetry[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("FailTwiceThenSucceed", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		rec := &recorder{}
		s, err := dedupe.New(sqlonce.Observe(db.Driver(), rec))
		must(t, err)
		script := &retryScript{fail: func(st dedupe.StepState) error {
			if st.Try < 3 {
				return fmt.Errorf("call %d: %w", st.Try, errTransient)
			}
			return nil
		}}
		op := retryOp(db, script, dedupe.Retry{Attempts: 3, Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond})
		req := dedupe.Request{Scope: "retry", Key: "k1", Fingerprint: []byte("fp")}
		res, err := s.RunSteps(ctx, req, []byte("k1"), op)
		if err != nil || !res.FirstRun() || string(res.Response) != "order: charged on try 3" {
			t.Fatalf("RunSteps: %v, %q, %v", res.Outcome, res.Response, err)
		}
		for i, c := range script.seen() {
			if c.attempt != 1 || c.try != i+1 {
				t.Fatalf("calls %+v: want one run, tries 1, 2, 3", script.seen())
			}
		}
		if got := script.tries(); !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("tries %v, want [1 2 3]", got)
		}
		ledgerIs(t, ctx, db, "k1/charge", 1)
		ledgerIs(t, ctx, db, "k1/order", 1)
		e := rec.last()
		if e.Operation != "RunSteps" || e.Status != sqlonce.EventFirstRun || e.Attempts < 3 || !errors.Is(e.RetryCause, errTransient) {
			t.Fatalf("event %+v: want RunSteps, first run, the retries in Attempts, the step's error as RetryCause", e)
		}
		res, err = s.RunSteps(ctx, req, []byte("k1"), op)
		if err != nil || res.Outcome != sqlonce.AlreadyDone || string(res.Response) != "order: charged on try 3" {
			t.Fatalf("repeat: %v, %q, %v", res.Outcome, res.Response, err)
		}
		if len(script.seen()) != 3 {
			t.Fatalf("the repeat called the step: %+v", script.seen())
		}
	})

	t.Run("NotRetryableStopsAtOnce", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		declined := true
		script := &retryScript{fail: func(st dedupe.StepState) error {
			if declined {
				return errFatal
			}
			return nil
		}}
		op := retryOp(db, script, dedupe.Retry{Attempts: 5, Initial: time.Millisecond, Max: time.Millisecond,
			Retryable: func(err error) bool { return !errors.Is(err, errFatal) }})
		req := dedupe.Request{Scope: "retry", Key: "k2", Fingerprint: []byte("fp")}
		if _, err := s.RunSteps(ctx, req, []byte("k2"), op); !errors.Is(err, errFatal) {
			t.Fatalf("RunSteps: %v, want the step's error", err)
		}
		if got := script.tries(); !slices.Equal(got, []int{1}) {
			t.Fatalf("tries %v, want [1]", got)
		}
		ledgerIs(t, ctx, db, "k2/charge", 0)
		// The run stopped as an error stops it today: the lease released,
		// the next call resumes at the step at once.
		script.mu.Lock()
		declined = false
		script.mu.Unlock()
		script.reset()
		res, err := s.RunSteps(ctx, req, []byte("k2"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("next call: %v, %v", res.Outcome, err)
		}
		if c := script.seen(); len(c) != 1 || c[0].attempt != 2 || c[0].try != 1 {
			t.Fatalf("next call's calls %+v, want one, attempt 2, try 1", c)
		}
		ledgerIs(t, ctx, db, "k2/charge", 1)
	})

	t.Run("ExhaustedThenResumer", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		script := &retryScript{fail: func(st dedupe.StepState) error {
			// The first run fails all its tries; the resumer's fails
			// twice, then succeeds.
			if st.Attempt == 1 || st.Try < 3 {
				return errTransient
			}
			return nil
		}}
		op := retryOp(db, script, dedupe.Retry{Attempts: 3, Initial: time.Millisecond, Max: 4 * time.Millisecond})
		t0 := clockBase()
		req := dedupe.Request{Scope: "retry", Key: "k3", Fingerprint: []byte("fp")}
		if _, err := s.RunSteps(at(ctx, t0, 0), req, []byte("k3"), op); !errors.Is(err, errTransient) {
			t.Fatalf("RunSteps: %v, want the step's error", err)
		}
		if got := script.tries(); !slices.Equal(got, []int{1, 2, 3}) {
			t.Fatalf("tries %v, want [1 2 3]", got)
		}
		ledgerIs(t, ctx, db, "k3/charge", 0)
		script.reset()
		done, failed, err := s.ResumeStuck(at(ctx, t0, time.Minute+time.Second), 5, op)
		if err != nil || done != 1 || failed != 0 {
			t.Fatalf("ResumeStuck: %d finished, %d failed, %v", done, failed, err)
		}
		for i, c := range script.seen() {
			if c.attempt != 2 || c.try != i+1 {
				t.Fatalf("resumer's calls %+v: want attempt 2, tries 1, 2, 3", script.seen())
			}
		}
		if len(script.seen()) != 3 {
			t.Fatalf("resumer's calls %+v: want 3", script.seen())
		}
		ledgerIs(t, ctx, db, "k3/charge", 1)
		ledgerIs(t, ctx, db, "k3/order", 1)
		res, err := s.RunSteps(at(ctx, t0, 2*time.Minute), req, []byte("k3"), op)
		if err != nil || res.Outcome != sqlonce.AlreadyDone || string(res.Response) != "order: charged on try 3" {
			t.Fatalf("repeat: %v, %q, %v", res.Outcome, res.Response, err)
		}
	})

	t.Run("BackoffBoundedByMax", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		script := &retryScript{fail: func(dedupe.StepState) error { return errTransient }}
		const initial, maxWait, attempts = 20 * time.Millisecond, 80 * time.Millisecond, 9
		op := retryOp(db, script, dedupe.Retry{Attempts: attempts, Initial: initial, Max: maxWait})
		req := dedupe.Request{Scope: "retry", Key: "k4", Fingerprint: []byte("fp")}
		if _, err := s.RunSteps(ctx, req, []byte("k4"), op); !errors.Is(err, errTransient) {
			t.Fatalf("RunSteps: %v, want the step's error", err)
		}
		calls := script.seen()
		if len(calls) != attempts {
			t.Fatalf("%d calls, want %d", len(calls), attempts)
		}
		// Equal jitter: the wait after call n is in [d/2, d], d =
		// min(Max, Initial<<(n-1)). A wait never ends early, so each gap
		// between calls (by the step's own clock) is at least d/2. Max
		// caps the waits: an unbounded backoff would wait at least
		// Initial<<(n-1)/2 after call n, 640ms after the 7th and 1280ms
		// after the 8th, eight and sixteen times Max; the capped gaps
		// stay under that by far, however loaded the machine (no bound
		// near Max itself: a gap is the wait plus the lease's extension
		// and the scheduler's delays).
		var gaps []time.Duration
		for i := 1; i < len(calls); i++ {
			gaps = append(gaps, calls[i].at.Sub(calls[i-1].at))
		}
		for i, gap := range gaps {
			n := i + 1
			d := min(maxWait, initial<<(n-1))
			if gap < d/2 {
				t.Fatalf("gaps %v: gap %d is %v, want at least %v", gaps, n, gap, d/2)
			}
			if unbounded := initial << (n - 1) / 2; unbounded >= 8*maxWait && gap >= unbounded {
				t.Fatalf("gaps %v: gap %d is %v, as long as an unbounded backoff's (%v): Max %v does not cap it", gaps, n, gap, unbounded, maxWait)
			}
		}
	})

	t.Run("CancelDuringBackoffThenAnotherCaller", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		t0 := clockBase()
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		defer cancel()
		script := &retryScript{fail: func(st dedupe.StepState) error {
			if st.Attempt == 1 {
				// Cancel the run during the backoff that follows.
				time.AfterFunc(50*time.Millisecond, cancel)
				return errTransient
			}
			return nil
		}}
		const wait = 10 * time.Second
		op := retryOp(db, script, dedupe.Retry{Attempts: 5, Initial: wait, Max: wait})
		req := dedupe.Request{Scope: "retry", Key: "k5", Fingerprint: []byte("fp")}
		if _, err := s.RunSteps(runCtx, req, []byte("k5"), op); !errors.Is(err, context.Canceled) {
			t.Fatalf("RunSteps: %v, want context.Canceled", err)
		}
		if got := script.tries(); !slices.Equal(got, []int{1}) {
			t.Fatalf("tries %v, want [1]: no call after the cancel", got)
		}
		// The lease is left to lapse, extended over the backoff and a
		// whole Lease after it: a caller past the unextended lease is
		// still told the key is in progress.
		if _, err := s.RunSteps(at(ctx, t0, time.Minute+wait/2), req, []byte("k5"), op); !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("call within the lease: %v, want ErrInProgress", err)
		}
		script.reset()
		// Once it lapsed, racing callers: one resumes, and the step's
		// effect happens once, on its successful call.
		later := at(ctx, t0, wait+time.Minute+time.Second)
		var wg sync.WaitGroup
		results := make([]error, 4)
		for i := range results {
			wg.Go(func() {
				res, err := s.RunSteps(later, req, []byte("k5"), op)
				if err == nil && res.Outcome == sqlonce.AlreadyDone {
					err = nil
				} else if err == nil && !res.FirstRun() {
					err = fmt.Errorf("outcome %v", res.Outcome)
				}
				results[i] = err
			})
		}
		wg.Wait()
		for _, err := range results {
			if err != nil && !errors.Is(err, sqlonce.ErrInProgress) {
				t.Fatalf("racing callers: %v", results)
			}
		}
		if c := script.seen(); len(c) != 1 || c[0].attempt != 2 || c[0].try != 1 {
			t.Fatalf("calls after the lapse %+v, want one, attempt 2, try 1", c)
		}
		ledgerIs(t, ctx, db, "k5/charge", 1)
		ledgerIs(t, ctx, db, "k5/order", 1)
		res, err := s.RunSteps(later, req, []byte("k5"), op)
		if err != nil || res.Outcome != sqlonce.AlreadyDone || string(res.Response) != "order: charged on try 1" {
			t.Fatalf("repeat: %v, %q, %v", res.Outcome, res.Response, err)
		}
	})

	t.Run("BadPolicy", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		script := &retryScript{fail: func(dedupe.StepState) error { return nil }}
		req := dedupe.Request{Scope: "retry", Key: "bad", Fingerprint: []byte("fp")}
		for _, tc := range []struct {
			field  string
			policy dedupe.Retry
		}{
			{"Retry.Attempts", dedupe.Retry{Attempts: -1}},
			{"Retry.Initial", dedupe.Retry{Attempts: 2}},
			{"Retry.Initial", dedupe.Retry{Attempts: 2, Initial: -time.Second, Max: time.Second}},
			{"Retry.Max", dedupe.Retry{Attempts: 2, Initial: time.Second, Max: time.Millisecond}},
		} {
			op := retryOp(db, script, tc.policy)
			if _, err := s.RunSteps(ctx, req, nil, op); !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("RunSteps with %+v: %v, want ErrInvalidArgument naming %s", tc.policy, err, tc.field)
			}
			if err := s.ResumeEvery(ctx, time.Second, 3, op); !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("ResumeEvery with %+v: %v, want ErrInvalidArgument naming %s", tc.policy, err, tc.field)
			}
		}
		// A database step takes no Retry.
		op := retryOp(db, script, dedupe.Retry{})
		op.Steps[1].Retry = dedupe.Retry{Attempts: 3, Initial: time.Millisecond, Max: time.Millisecond}
		if _, err := s.RunSteps(ctx, req, nil, op); !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "Retry") {
			t.Fatalf("RunSteps with a Retry on a database step: %v, want ErrInvalidArgument", err)
		}
		if len(script.seen()) != 0 {
			t.Fatal("a bad operation ran a step")
		}
	})
}
