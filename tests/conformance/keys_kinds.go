package conformance

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// inboxInspectForget: Inbox.Inspect reads a remembered message id of its
// consumer, and Inbox.Forget deletes it so that the next delivery applies
// the message again; never another consumer's id, nor a dedupe key of the
// same spelling.
func inboxInspectForget[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	ctx := ctxT(t)
	in, err := inbox.New(db.Driver(), "ledger-writer")
	must(t, err)
	other, err := inbox.New(db.Driver(), "mailer")
	must(t, err)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	applied := 0
	handle := func() sqlonce.Result {
		t.Helper()
		res, err := in.Handle(ctx, "evt-7", func(context.Context, TTx) error { applied++; return nil })
		must(t, err)
		return res
	}
	_, err = in.Inspect(ctx, "evt-7")
	wantErr(t, "inspect before the delivery", err, sqlonce.ErrNotFound)
	handle()
	info, err := in.Inspect(ctx, "evt-7")
	must(t, err)
	if info.State != dedupe.KeyDone || info.Scope != "ledger-writer" || info.Key != "evt-7" || info.HasResponse {
		t.Fatalf("inspect: %+v", info)
	}
	_, err = other.Inspect(ctx, "evt-7")
	wantErr(t, "inspect as another consumer", err, sqlonce.ErrNotFound)
	wantErr(t, "forget as another consumer", other.Forget(ctx, "evt-7"), sqlonce.ErrNotFound)
	_, err = s.Inspect(ctx, "ledger-writer", "evt-7")
	wantErr(t, "inspect as a dedupe key", err, sqlonce.ErrNotFound)
	if res := handle(); !res.AlreadyDone() || applied != 1 {
		t.Fatalf("redelivery: %v, applied %d", res, applied)
	}
	must(t, in.Forget(ctx, "evt-7"))
	wantErr(t, "forget again", in.Forget(ctx, "evt-7"), sqlonce.ErrNotFound)
	if res := handle(); !res.FirstRun() || applied != 2 {
		t.Fatalf("redelivery after Forget: %v, applied %d; want it applied again", res, applied)
	}
	_, err = in.Inspect(ctx, "")
	wantErr(t, "inspect without an id", err, sqlonce.ErrInvalidKey)
}

// httpInspectForget: Middleware.Inspect finds the key a client sent by
// the caller's principal, and Middleware.Forget deletes it so that the
// client's repeat runs the handler again; never another principal's key.
func httpInspectForget[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	ctx := ctxT(t)
	m, err := httpidem.New(db.Driver(), func(r *http.Request) string { return r.Header.Get("X-User") })
	must(t, err)
	runs := 0
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Write([]byte("paid"))
	}))
	pay := func() (int, bool) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1}`)).WithContext(ctx)
		req.Header.Set("X-User", "user-42")
		req.Header.Set("Idempotency-Key", `"pay-1"`)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("POST /pay: %d %s", rec.Code, rec.Body)
		}
		return runs, rec.Header().Get(httpidem.ReplayHeader) == "true"
	}
	_, err = m.Inspect(ctx, "user-42", "pay-1")
	wantErr(t, "inspect before the request", err, sqlonce.ErrNotFound)
	pay()
	if n, replayed := pay(); n != 1 || !replayed {
		t.Fatalf("repeat: %d runs, replayed %v", n, replayed)
	}
	info, err := m.Inspect(ctx, "user-42", "pay-1")
	must(t, err)
	if info.State != dedupe.KeyDone || info.Scope != "user-42" || info.Key != "pay-1" || !info.HasResponse || info.FingerprintSize == 0 {
		t.Fatalf("inspect: %+v", info)
	}
	_, err = m.Inspect(ctx, "user-43", "pay-1")
	wantErr(t, "inspect as another principal", err, sqlonce.ErrNotFound)
	wantErr(t, "forget as another principal", m.Forget(ctx, "user-43", "pay-1"), sqlonce.ErrNotFound)
	_, err = m.InspectSteps(ctx, "user-42", "pay-1")
	wantErr(t, "inspect as a request run as steps", err, sqlonce.ErrNotFound)
	must(t, m.Forget(ctx, "user-42", "pay-1"))
	if n, replayed := pay(); n != 2 || replayed {
		t.Fatalf("repeat after Forget: %d runs, replayed %v; want the handler run again", n, replayed)
	}
	if n, replayed := pay(); n != 2 || !replayed {
		t.Fatalf("repeat of the repeat: %d runs, replayed %v", n, replayed)
	}
}

// stepsInspectForget: Store.InspectSteps tells where a stopped operation
// stands, and Store.ForgetSteps lets the next RunSteps start it anew;
// neither reaches the Store's keys of Do, Run or Claim.
func stepsInspectForget[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	ctx := ctxT(t)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	reserved, fail := 0, true
	op := &dedupe.Operation[TTx]{Name: "checkout", Lease: time.Minute, Steps: []dedupe.Step[TTx]{
		{Name: "reserve", Outside: func(context.Context, dedupe.StepState) ([]byte, error) { reserved++; return []byte("r"), nil }},
		{Name: "charge", Outside: func(context.Context, dedupe.StepState) ([]byte, error) {
			if fail {
				return nil, errors.New("card network down")
			}
			return []byte("paid"), nil
		}},
	}}
	req := dedupe.Request{Scope: "cust-9", Key: "order-1"}
	if _, err := s.RunSteps(ctx, req, []byte("in"), op); err == nil {
		t.Fatal("the failing step did not stop the operation")
	}
	info, err := s.InspectSteps(ctx, "cust-9", "order-1")
	must(t, err)
	if info.Operation != "checkout" || len(info.Done) != 1 || info.Done[0] != "reserve" || info.Attempts != 1 || info.Failed != "" ||
		(info.State != dedupe.KeyLapsed && info.State != dedupe.KeyLeased) {
		t.Fatalf("inspect a stopped operation: %+v", info)
	}
	_, err = s.Inspect(ctx, "cust-9", "order-1")
	wantErr(t, "inspect as a key of Do", err, sqlonce.ErrNotFound)
	wantErr(t, "forget as a key of Do", s.Forget(ctx, "cust-9", "order-1", dedupe.ForgetLeased()), sqlonce.ErrNotFound)
	must(t, s.ForgetSteps(ctx, "cust-9", "order-1", dedupe.ForgetLeased()))
	wantErr(t, "forget again", s.ForgetSteps(ctx, "cust-9", "order-1"), sqlonce.ErrNotFound)
	fail = false
	res, err := s.RunSteps(ctx, req, []byte("in"), op)
	must(t, err)
	if !res.FirstRun() || string(res.Response) != "paid" || reserved != 2 {
		t.Fatalf("RunSteps after ForgetSteps: %v %q, reserved %d times; want a fresh run", res, res.Response, reserved)
	}
	info, err = s.InspectSteps(ctx, "cust-9", "order-1")
	must(t, err)
	if info.State != dedupe.KeyDone || info.Operation != "checkout" || info.Done != nil || info.Failed != "" || !info.HasResponse {
		t.Fatalf("inspect a done operation: %+v", info)
	}
}
