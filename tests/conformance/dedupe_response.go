package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runDedupeResponseNil pins the one rule for Result.Response: nil exactly
// when nothing is recorded for the key (Do, a lease not yet completed);
// a recorded response is non-nil, even empty (DoResponse, Run or Complete
// given a nil response record an empty one). FirstRun and every replay
// agree, on every database.
func runDedupeResponseNil[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	s, err := dedupe.New(db.Driver())
	must(t, err)

	do := func(key string) (sqlonce.Result, error) {
		var res sqlonce.Result
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			res, err = s.Do(ctx, tx, dedupe.Request{Scope: "resp", Key: key}, func(context.Context) error { return nil })
			return err
		})
		return res, err
	}
	doResponse := func(key string, resp []byte) (sqlonce.Result, error) {
		var res sqlonce.Result
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			res, err = s.DoResponse(ctx, tx, dedupe.Request{Scope: "resp", Key: key}, func(context.Context) ([]byte, error) { return resp, nil })
			return err
		})
		return res, err
	}
	run := func(key string, resp []byte) (sqlonce.Result, error) {
		return s.Run(ctx, dedupe.Request{Scope: "resp", Key: key}, func(context.Context, TTx) ([]byte, error) { return resp, nil })
	}
	claim := func(key string) (sqlonce.Result, error) {
		l, res, err := s.Claim(ctx, dedupe.Request{Scope: "resp", Key: key}, time.Minute)
		if err == nil && l != nil {
			if res.Response != nil {
				t.Errorf("Claim %s: FirstRun with response %q, want nil (nothing recorded yet)", key, res.Response)
			}
			err = s.Complete(ctx, l, nil)
		}
		return res, err
	}
	// want: "nil" or the recorded bytes (possibly "").
	check := func(what string, res sqlonce.Result, err error, outcome sqlonce.Outcome, want *string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		switch {
		case res.Outcome != outcome:
			t.Errorf("%s: outcome %v, want %v", what, res.Outcome, outcome)
		case want == nil && res.Response != nil:
			t.Errorf("%s: response %q (non-nil), want nil: nothing was recorded", what, res.Response)
		case want != nil && res.Response == nil:
			t.Errorf("%s: nil response, want %q (non-nil): a response was recorded", what, *want)
		case want != nil && string(res.Response) != *want:
			t.Errorf("%s: response %q, want %q", what, res.Response, *want)
		}
	}
	empty, x := ptr(""), ptr("x")

	// Do records nothing: nil, first and on every replay.
	res, err := do("do")
	check("Do", res, err, sqlonce.FirstRun, nil)
	res, err = do("do")
	check("Do replayed by Do", res, err, sqlonce.AlreadyDone, nil)
	res, err = doResponse("do", []byte("y"))
	check("Do replayed by DoResponse", res, err, sqlonce.AlreadyDone, nil)
	res, err = run("do", []byte("y"))
	check("Do replayed by Run", res, err, sqlonce.AlreadyDone, nil)

	// DoResponse, Run and Complete record a nil response as empty.
	for name, first := range map[string]func(key string) (sqlonce.Result, error){
		"DoResponse": func(key string) (sqlonce.Result, error) { return doResponse(key, nil) },
		"Run":        func(key string) (sqlonce.Result, error) { return run(key, nil) },
	} {
		res, err := first(name + "-nil")
		check(name+" of nil", res, err, sqlonce.FirstRun, empty)
		res, err = first(name + "-empty")
		check(name+" of empty", res, err, sqlonce.FirstRun, empty)
	}
	res, err = claim("Claim-nil")
	check("Claim", res, err, sqlonce.FirstRun, nil)
	for _, key := range []string{"DoResponse-nil", "DoResponse-empty", "Run-nil", "Run-empty", "Claim-nil"} {
		res, err := do(key)
		check(key+" replayed by Do", res, err, sqlonce.AlreadyDone, empty)
		res, err = doResponse(key, []byte("y"))
		check(key+" replayed by DoResponse", res, err, sqlonce.AlreadyDone, empty)
		res, err = run(key, []byte("y"))
		check(key+" replayed by Run", res, err, sqlonce.AlreadyDone, empty)
		res, err = claim(key)
		check(key+" replayed by Claim", res, err, sqlonce.AlreadyDone, empty)
	}

	// A recorded answer comes back byte for byte.
	res, err = doResponse("x", []byte("x"))
	check("DoResponse of x", res, err, sqlonce.FirstRun, x)
	res, err = do("x")
	check("x replayed by Do", res, err, sqlonce.AlreadyDone, x)
}

// runDedupeSameTx: the same key twice in one transaction. The second call
// sees the first's claim, which its own transaction holds: AlreadyDone
// (with the first's response), never a wait on itself and never
// ErrInProgress; after a first call whose fn failed (its claim undone),
// the second runs fn.
func runDedupeSameTx[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	failed := errors.New("fn failed")
	must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		b := db.Tx(tx)
		req := dedupe.Request{Scope: "same-tx", Key: "do"}
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, err := s.Do(ctx, tx, req, func(ctx context.Context) error { return b.LedgerInsert(ctx, "same-do", 1) })
			wantOutcome(t, fmt.Sprintf("Do %d", i), res, err, want, nil)
		}
		req.Key = "resp"
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, err := s.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
				return []byte(fmt.Sprintf("answer-%d", i)), b.LedgerInsert(ctx, "same-resp", 1)
			})
			wantOutcome(t, fmt.Sprintf("DoResponse %d", i), res, err, want, ptr("answer-0"))
		}
		req.Key = "failed"
		if _, err := s.Do(ctx, tx, req, func(context.Context) error { return failed }); !errors.Is(err, failed) {
			t.Fatalf("failing Do: %v", err)
		}
		res, err := s.Do(ctx, tx, req, func(ctx context.Context) error { return b.LedgerInsert(ctx, "same-failed", 1) })
		wantOutcome(t, "Do after a failed Do", res, err, sqlonce.FirstRun, nil)
		req.Key = "leased"
		l, res, err := s.ClaimTx(ctx, tx, req, time.Minute)
		wantLease(t, "ClaimTx", req, l, res, err)
		_, err = s.Do(ctx, tx, req, func(context.Context) error { return b.LedgerInsert(ctx, "same-leased", 1) })
		wantErr(t, "Do after ClaimTx in the same tx", err, sqlonce.ErrInProgress)
		return nil
	}))
	ddLedger(t, db, "same-leased", 0)
	for _, ref := range []string{"same-do", "same-resp", "same-failed"} {
		ddLedger(t, db, ref, 1)
	}
}
