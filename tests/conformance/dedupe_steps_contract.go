package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

var errStepPanic = errors.New("injected panic value")

// runStepsContract proves what the docs of RunSteps, ResumeStuck and
// ResumeEvery promise about panics, cancelled contexts, the input's
// limit and the TTL of a key the resumer finishes.
func runStepsContract[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const lease = time.Minute

	// A panic in a step: RunSteps hands it to its caller unchanged, the
	// step's transaction rolled back, and the lease left to lapse; the
	// resumer recovers it, returns it as that key's error and goes on,
	// the attempt counted.
	t.Run("PanicInAStep", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		var panicIn atomic.Value // the step to panic in, once
		panicIn.Store("")
		arm := func(step string) { panicIn.Store(step) }
		strikeHere := func(step string) {
			if panicIn.CompareAndSwap(step, "") {
				panic(fmt.Errorf("step %s: %w", step, errStepPanic))
			}
		}
		op := &dedupe.Operation[TTx]{Name: "fragile", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				if err := db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/write", 1); err != nil {
					return nil, err
				}
				strikeHere("write")
				return []byte("written"), nil
			}},
			{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				strikeHere("answer")
				return []byte("ok " + string(st.Input)), nil
			}},
		}}
		ledger := func(want int64) {
			t.Helper()
			n, err := db.Pool().LedgerCountByRef(ctx, "p1/write")
			must(t, err)
			if n != want {
				t.Fatalf("ledger rows %d, want %d", n, want)
			}
		}
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "p1"}

		// RunSteps: the panic reaches the caller, with its value.
		arm("write")
		var got any
		func() {
			defer func() { got = recover() }()
			_, _ = s.RunSteps(at(ctx, t0, 0), req, []byte("p1"), op)
		}()
		if e, ok := got.(error); !ok || !errors.Is(e, errStepPanic) {
			t.Fatalf("RunSteps panicked with %v, want the step's panic value", got)
		}
		ledger(0) // the step's transaction rolled back
		_, err = s.RunSteps(at(ctx, t0, time.Second), req, []byte("p1"), op)
		wantErr(t, "retry within the lease", err, sqlonce.ErrInProgress)

		// The resumer: a panic in a database step, then in an outside
		// step, each the key's error; the program goes on.
		resume := func(d time.Duration) (done, failed int, err error) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("ResumeStuck panicked: %v", p)
				}
			}()
			return s.ResumeStuck(at(ctx, t0, d), 5, op)
		}
		clock := lease + time.Second
		for _, step := range []string{"write", "answer"} {
			arm(step)
			done, failed, err := resume(clock)
			if done != 0 || failed != 0 || !errors.Is(err, errStepPanic) || !strings.Contains(err.Error(), "panicked") {
				t.Fatalf("resumer, panic in %s: %d done, %d failed, %v", step, done, failed, err)
			}
			_, err = s.RunSteps(at(ctx, t0, clock+time.Second), req, []byte("p1"), op)
			wantErr(t, "retry after the resumer's panic in "+step, err, sqlonce.ErrInProgress)
			clock += lease + time.Second
		}
		ledger(1) // write committed in the resumer's second run
		info, err := s.InspectSteps(at(ctx, t0, clock), req.Scope, req.Key)
		must(t, err)
		if info.Attempts != 3 || len(info.Done) != 1 {
			t.Fatalf("after two panics in the resumer: %+v, want 3 attempts and write done", info)
		}
		done, failed, err := resume(clock)
		if done != 1 || failed != 0 || err != nil {
			t.Fatalf("resumer: %d done, %d failed, %v", done, failed, err)
		}
		res, err := s.RunSteps(at(ctx, t0, clock), req, []byte("p1"), op)
		wantOutcome(t, "replay", res, err, sqlonce.AlreadyDone, ptr("ok p1"))
		ledger(1)
	})

	// A context that ends inside a step the resumer runs stops that key's
	// run as a cancelled RunSteps does: the lease is left to lapse, and
	// the key waits for a retry or the next round.
	t.Run("ResumerCancelled", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "rc"}
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		faults.fault, faults.cancel = &stepFault{step: "charge", mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("rc"), op)
		cancel()
		wantErr(t, "stopped run", err, context.Canceled)
		_, err = s.RunSteps(at(ctx, t0, time.Second), req, []byte("rc"), op)
		wantErr(t, "retry within the cancelled run's lease", err, sqlonce.ErrInProgress)

		rctx, rcancel := context.WithCancel(at(ctx, t0, lease+time.Second))
		faults.fault, faults.cancel = &stepFault{step: "order", inside: true, mode: "cancel"}, rcancel
		done, failed, err := s.ResumeStuck(rctx, 3, op)
		rcancel()
		if done != 0 || failed != 0 || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled resumer: %d done, %d failed, %v", done, failed, err)
		}
		_, err = s.RunSteps(at(ctx, t0, lease+2*time.Second), req, []byte("rc"), op)
		wantErr(t, "retry within the cancelled resumer's lease", err, sqlonce.ErrInProgress)
		res, err := s.RunSteps(at(ctx, t0, 2*lease+2*time.Second), req, []byte("rc"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("retry after the lease: %v, %v", res, err)
		}
		wantLedgerOnce(t, ctx, db, "rc")
		svc.effectsOnce(t, 2)
	})

	// The input is stored with the key's recovery point, beside the
	// operation's name and the results of the steps done: all of it
	// within the Store's WithMaxResponseSize. Past it, ErrResponseTooLarge
	// before any SQL; a step whose result would not fit stops the run
	// with it, its transaction rolled back.
	t.Run("InputLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		const limit = 4096
		s, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(limit))
		must(t, err)
		op := &dedupe.Operation[TTx]{Name: "big", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				if err := db.Tx(tx).LedgerInsert(ctx, fmt.Sprintf("big/%d", len(st.Input)), 1); err != nil {
					return nil, err
				}
				return make([]byte, 1000), nil
			}},
			{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				return []byte("ok"), nil
			}},
		}}
		req := dedupe.Request{Scope: "steps", Key: "too-big"}
		_, err = s.RunSteps(ctx, req, make([]byte, limit), op)
		wantErr(t, "input of the limit", err, sqlonce.ErrResponseTooLarge)
		_, err = s.InspectSteps(ctx, req.Scope, req.Key)
		wantErr(t, "key of a refused input", err, sqlonce.ErrNotFound)

		// Fits alone, not with the first step's 1000 bytes.
		req.Key = "fits-alone"
		_, err = s.RunSteps(ctx, req, make([]byte, 3500), op)
		wantErr(t, "input and a result over the limit", err, sqlonce.ErrResponseTooLarge)
		if n, err := db.Pool().LedgerCountByRef(ctx, "big/3500"); err != nil || n != 0 {
			t.Fatalf("the step's write: %d rows, %v; want rolled back", n, err)
		}

		req.Key = "fits"
		res, err := s.RunSteps(ctx, req, make([]byte, 2000), op)
		wantOutcome(t, "input within the limit", res, err, sqlonce.FirstRun, ptr("ok"))
	})

	// The resumer records the response for the TTL of the key's first
	// call, counted from when it finishes the operation, not from that
	// call: a key finished late lives its whole TTL after.
	t.Run("ResumedKeyTTLFromTheEnd", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "late", TTL: time.Hour}
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		faults.fault, faults.cancel = &stepFault{step: "charge", inside: true, mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("late"), op)
		cancel()
		wantErr(t, "stopped run", err, context.Canceled)
		end := 50 * time.Minute
		done, failed, err := s.ResumeStuck(at(ctx, t0, end), 3, op)
		if err != nil || done != 1 || failed != 0 {
			t.Fatalf("resumer: %d done, %d failed, %v", done, failed, err)
		}
		// Past an hour from the first call, within an hour of the end.
		res, err := s.RunSteps(at(ctx, t0, end+time.Hour-time.Second), req, []byte("late"), op)
		if err != nil || !res.AlreadyDone() {
			t.Fatalf("an hour after the first call: %v, %v; want AlreadyDone", res, err)
		}
		res, err = s.RunSteps(at(ctx, t0, end+time.Hour), req, []byte("late"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("an hour after the end: %v, %v; want the key expired, a first run", res, err)
		}
	})
}
