package conformance

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// httpPaymentOp is paymentOp run by httpidem.Steps: the steps read the
// request with RequestOf (database steps write one ledger row each, ref
// "<principal>:<key>/<step>"), and the last one answers 201 with the order, the charge
// and random bytes, so that a replay can only equal the first answer by
// being it. gate, when set, holds the charge step until it is closed.
func httpPaymentOp[TTx any](db harness.DB[TTx], svc *outsideService, f *stepFaults, lease time.Duration, gate chan struct{}) *dedupe.Operation[TTx] {
	inTx := func(name string) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			q, err := httpidem.RequestOf(st)
			if err != nil {
				return nil, err
			}
			if err := strike(ctx, f, db, &tx, name, false); err != nil {
				return nil, err
			}
			if err := db.Tx(tx).LedgerInsert(ctx, q.Principal+":"+q.Key+"/"+name, 1); err != nil {
				return nil, err
			}
			if err := strike(ctx, f, db, &tx, name, true); err != nil {
				return nil, err
			}
			return fmt.Appendf(nil, "%s %s by %s: %s", name, q.Path, q.Principal, q.Body), nil
		}}
	}
	outside := func(name string, answer bool) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			if gate != nil && name == "charge" {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if err := strike[TTx](ctx, f, db, nil, name, false); err != nil {
				return nil, err
			}
			b, err := svc.call(ctx, name, st.Key)
			if err != nil {
				return nil, err
			}
			if err := strike[TTx](ctx, f, db, nil, name, true); err != nil {
				return nil, err
			}
			if !answer {
				return b, nil
			}
			order, _ := st.Result("order")
			charge, _ := st.Result("charge")
			nonce := make([]byte, 16)
			_, _ = rand.Read(nonce)
			h := http.Header{"Content-Type": {"text/plain"}, "Location": {fmt.Sprintf("/orders/%x", nonce[:4])}}
			return httpidem.Respond(http.StatusCreated, h, fmt.Appendf(nil, "%s|%s|%s|%x", order, charge, b, nonce))
		}}
	}
	return &dedupe.Operation[TTx]{
		Name:  "http-payment",
		Lease: lease,
		Steps: []dedupe.Step[TTx]{inTx("reserve"), outside("charge", false), inTx("order"), outside("email", true)},
	}
}

// stepsCall is one request to a Steps handler, served in this goroutine
// with ctx (which may carry a pinned clock); a panic is reported, not
// raised.
func stepsCall(ctx context.Context, h http.Handler, user, key, body string) (r reply, panicked any) {
	hr := httptest.NewRequestWithContext(ctx, http.MethodPost, "/pay/42", strings.NewReader(body))
	hr.Header.Set("X-User", user)
	hr.Header.Set(httpidem.Header, `"`+key+`"`)
	rec := httptest.NewRecorder()
	func() {
		defer func() { panicked = recover() }()
		h.ServeHTTP(rec, hr)
	}()
	resp := rec.Result()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, panicked
}

func newStepsHandler[TTx any](t *testing.T, db harness.DB[TTx], op *dedupe.Operation[TTx], opts ...httpidem.Option) (*httpidem.Middleware[TTx], http.Handler) {
	t.Helper()
	opts = append([]httpidem.Option{httpidem.WithErrorLog(func(*http.Request, error) {})}, opts...)
	m, err := httpidem.New(db.Driver(), func(r *http.Request) string { return r.Header.Get("X-User") }, opts...)
	must(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /pay/{id}", m.Steps(op))
	return m, mux
}

// runHTTPIdemSteps: a request run as steps (httpidem.Middleware.Steps),
// stopped at every step boundary and inside every step, is finished by a
// retry with its key or by the resumer: each database step once (in
// the ledger), each outside step once at the outside service, the answer
// replayed byte for byte; another body with the key is 422, a duplicate
// while it runs 409.
func runHTTPIdemSteps[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const lease = time.Minute
	steps := []string{"reserve", "charge", "order", "email"}
	isDB := map[string]bool{"reserve": true, "order": true}

	for _, by := range []string{"Retry", "Resumer"} {
		t.Run("StopEverywhereThen"+by, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			svc := newOutsideService(t)
			faults := &stepFaults{}
			op := httpPaymentOp(db, svc, faults, lease, nil)
			m, h := newStepsHandler(t, db, op)
			t0 := clockBase()
			clock := time.Duration(0)
			cases := stopCases(steps, isDB, db.Dialect())
			for i, c := range cases {
				key := fmt.Sprintf("pay-%d", i)
				runCtx, cancel := context.WithCancel(at(ctx, t0, clock))
				faults.mu.Lock()
				fault := c
				faults.fault, faults.cancel = &fault, cancel
				faults.mu.Unlock()
				first, panicked := stepsCall(runCtx, h, "alice", key, "book")
				cancel()
				if first.status == http.StatusCreated {
					t.Fatalf("%+v: the run did not stop", c)
				}
				if (c.mode == "panic") != (panicked != nil) {
					t.Fatalf("%+v: panicked %v", c, panicked)
				}
				if c.mode == "error" || c.mode == "kill" {
					wantHTTPStatus(t, fmt.Sprintf("%+v: first", c), first, http.StatusInternalServerError)
					if p := first.problem(t); p.Code != httpidem.CodeOutcomeUnknown {
						t.Fatalf("%+v: problem %+v", c, p)
					}
				}
				// The lease lapses (an error releases it at once).
				clock += lease + time.Second
				var answer reply
				switch by {
				case "Retry":
					answer, panicked = stepsCall(at(ctx, t0, clock), h, "alice", key, "book")
					if panicked != nil {
						t.Fatalf("%+v: retry panicked: %v", c, panicked)
					}
					wantHTTPStatus(t, fmt.Sprintf("%+v: retry", c), answer, http.StatusCreated)
					if answer.replayed() {
						t.Fatalf("%+v: the retry that finished the request is marked replayed", c)
					}
				case "Resumer":
					done, failed, err := m.ResumeStuck(at(ctx, t0, clock), 3, op)
					if err != nil || done != 1 || failed != 0 {
						t.Fatalf("%+v: resumer: %d done, %d failed, %v", c, done, failed, err)
					}
				}
				replay, panicked := stepsCall(at(ctx, t0, clock), h, "alice", key, "book")
				if panicked != nil {
					t.Fatalf("%+v: replay panicked: %v", c, panicked)
				}
				wantHTTPStatus(t, fmt.Sprintf("%+v: replay", c), replay, http.StatusCreated)
				if by == "Retry" {
					sameAnswer(t, fmt.Sprintf("%+v", c), answer, replay)
				} else if !replay.replayed() {
					t.Fatalf("%+v: the resumer's answer is not marked replayed", c)
				}
				want := fmt.Sprintf("order /pay/42 by alice: book|charge_%s|email_%s|", dedupe.StepKey("k:alice", key, "charge")[:12], dedupe.StepKey("k:alice", key, "email")[:12])
				if !strings.HasPrefix(string(replay.body), want) || replay.header.Get("Location") == "" {
					t.Fatalf("%+v: answer %q (Location %q), want %q...", c, replay.body, replay.header.Get("Location"), want)
				}
				wantLedgerOnce(t, ctx, db, "alice:"+key)
				clock += time.Second
			}
			svc.effectsOnce(t, 2*len(cases))
			t.Logf("%d stopped requests, then the %s: outside service got %d calls for %d keys", len(cases), strings.ToLower(by), svc.calls.Load(), 2*len(cases))
		})
	}

	t.Run("ApartFromDedupe", func(t *testing.T) { runHTTPIdemStepsApart(t, f) })

	// With WithWait a duplicate is held while the first request runs its
	// steps, and then gets its answer.
	t.Run("WaitForTheFirst", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		svc := newOutsideService(t)
		gate := make(chan struct{})
		_, h := newStepsHandler(t, db, httpPaymentOp(db, svc, &stepFaults{}, lease, gate), httpidem.WithWait(30*time.Second))
		firstDone := make(chan reply, 1)
		go func() {
			r, _ := stepsCall(ctx, h, "alice", "wait", "book")
			firstDone <- r
		}()
		waitFor(t, func() bool {
			n, err := db.Pool().LedgerCountByRef(ctx, "alice:wait/reserve")
			return err == nil && n == 1
		})
		go func() {
			time.Sleep(100 * time.Millisecond)
			close(gate)
		}()
		dup, _ := stepsCall(ctx, h, "alice", "wait", "book")
		first := <-firstDone
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		sameAnswer(t, "held duplicate", first, dup)
		wantLedgerOnce(t, ctx, db, "alice:wait")
		svc.effectsOnce(t, 2)
	})

	// Two Steps handlers whose requests have one fingerprint (a route
	// and a fingerprint of the body alone): the key sent to the second
	// one, while the first runs and after it is done, is 422, never the
	// first one's answer replayed nor a 409 to wait for it, and the second
	// one's steps never run.
	t.Run("AnotherOperation", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		gate := make(chan struct{})
		var refundRan atomic.Int64
		op := func(name string, ran *atomic.Int64, gate <-chan struct{}) *dedupe.Operation[TTx] {
			return &dedupe.Operation[TTx]{Name: name, Lease: lease, Steps: []dedupe.Step[TTx]{
				{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
					if ran != nil {
						ran.Add(1)
					}
					if gate != nil {
						select {
						case <-gate:
						case <-ctx.Done():
							return nil, ctx.Err()
						}
					}
					return httpidem.Respond(http.StatusOK, nil, []byte(name))
				}},
			}}
		}
		m, err := httpidem.New(db.Driver(), func(r *http.Request) string { return r.Header.Get("X-User") },
			httpidem.WithErrorLog(func(*http.Request, error) {}),
			httpidem.WithRoute(func(*http.Request) string { return "orders" }),
			httpidem.WithFingerprint(func(r *http.Request, body []byte) ([]byte, error) { return body, nil }))
		must(t, err)
		mux := http.NewServeMux()
		mux.Handle("POST /checkout", m.Steps(op("checkout", nil, gate)))
		mux.Handle("POST /refund", m.Steps(op("refund", &refundRan, nil)))
		call := func(path string) reply {
			hr := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader("order 7"))
			hr.Header.Set("X-User", "alice")
			hr.Header.Set(httpidem.Header, `"k-7"`)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, hr)
			resp := rec.Result()
			b, _ := io.ReadAll(resp.Body)
			return reply{status: resp.StatusCode, header: resp.Header, body: b}
		}
		reused := func(what string, r reply) {
			t.Helper()
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("%s: %d %q, want 422", what, r.status, r.body)
				return
			}
			if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
				t.Errorf("%s: %+v", what, p)
			}
		}
		firstDone := make(chan reply, 1)
		go func() { firstDone <- call("/checkout") }()
		waitFor(t, func() bool {
			row, ok, err := db.Key(ctx, "k:alice", "k-7")
			return err == nil && ok && row.State == 2
		})
		reused("refund while checkout runs", call("/refund"))
		close(gate)
		first := <-firstDone
		wantHTTPStatus(t, "checkout", first, http.StatusOK)
		reused("refund after checkout", call("/refund"))
		if r := call("/checkout"); r.status != http.StatusOK || string(r.body) != "checkout" || !r.replayed() {
			t.Errorf("checkout again: %d %q, replayed %v; want checkout's answer replayed", r.status, r.body, r.replayed())
		}
		if n := refundRan.Load(); n != 0 {
			t.Errorf("refund's steps ran %d times, want never", n)
		}
	})

	// The scope Steps derives: the principal's alone ("k:"+principal,
	// hashed when longer than a scope may be), whatever the route, so
	// StepState.Key is dedupe.StepKey of it, the key and the step; two
	// callers' equal keys are apart.
	t.Run("StepKeyScope", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		op := &dedupe.Operation[TTx]{Name: "scoped", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				return httpidem.Respond(http.StatusCreated, nil, []byte(st.Key))
			}},
		}}
		m, h := newStepsHandler(t, db, op)
		long := strings.Repeat("p", 300)
		sum := sha256.Sum256([]byte("k:" + long))
		for _, c := range []struct{ principal, scope string }{
			{"alice", "k:alice"},
			{"bob", "k:bob"},
			{long, "k#" + hex.EncodeToString(sum[:])},
		} {
			r, _ := stepsCall(ctx, h, c.principal, "k-1", "same body")
			wantHTTPStatus(t, c.scope, r, http.StatusCreated)
			if r.replayed() || string(r.body) != dedupe.StepKey(c.scope, "k-1", "answer") {
				t.Fatalf("%s: st.Key %q (replayed %v), want dedupe.StepKey(%q, \"k-1\", \"answer\")", c.scope, r.body, r.replayed(), c.scope)
			}
			info, err := m.InspectSteps(ctx, c.principal, "k-1")
			must(t, err)
			if info.State != dedupe.KeyDone {
				t.Fatalf("%s: %+v, want done", c.scope, info)
			}
		}
	})

	// A request accepted by a WithMaxBody above dedupe.MaxResponseSize
	// but too large to store as the operation's input is 413, not a 500
	// that says part of the work may be done: nothing ran.
	t.Run("RequestOverTheInputLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		var ran atomic.Int64
		op := &dedupe.Operation[TTx]{Name: "big", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				ran.Add(1)
				return httpidem.Respond(http.StatusCreated, nil, nil)
			}},
		}}
		m, h := newStepsHandler(t, db, op, httpidem.WithMaxBody(32<<20))
		r, _ := stepsCall(ctx, h, "alice", "big-1", strings.Repeat("x", dedupe.MaxResponseSize))
		wantHTTPStatus(t, "request over the input limit", r, http.StatusRequestEntityTooLarge)
		if p := r.problem(t); p.Code != httpidem.CodeBodyTooLarge {
			t.Fatalf("request over the input limit: %+v", p)
		}
		if _, err := m.InspectSteps(ctx, "alice", "big-1"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Fatalf("key of the refused request: %v, want ErrNotFound", err)
		}
		r, _ = stepsCall(ctx, h, "alice", "big-2", strings.Repeat("x", 1<<20))
		wantHTTPStatus(t, "request within the limit", r, http.StatusCreated)
		if n := ran.Load(); n != 1 {
			t.Fatalf("the step ran %d times, want 1", n)
		}
	})

	t.Run("KeyReuseAndInProgress", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		_, h := newStepsHandler(t, db, httpPaymentOp(db, svc, faults, lease, nil))
		t0 := clockBase()
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		faults.fault, faults.cancel = &stepFault{step: "order", mode: "cancel"}, cancel
		stepsCall(runCtx, h, "alice", "pay-x", "book")
		cancel()
		r, _ := stepsCall(at(ctx, t0, time.Second), h, "alice", "pay-x", "book")
		wantHTTPStatus(t, "retry within the lease", r, http.StatusConflict)
		if p := r.problem(t); p.Code != httpidem.CodeInProgress || r.header.Get("Retry-After") == "" {
			t.Fatalf("retry within the lease: %+v, Retry-After %q", p, r.header.Get("Retry-After"))
		}
		r, _ = stepsCall(at(ctx, t0, 2*lease), h, "alice", "pay-x", "pen")
		wantHTTPStatus(t, "another body", r, http.StatusUnprocessableEntity)
		if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
			t.Fatalf("another body: %+v", p)
		}
		first, _ := stepsCall(at(ctx, t0, 2*lease), h, "alice", "pay-x", "book")
		wantHTTPStatus(t, "resumed", first, http.StatusCreated)
		r, _ = stepsCall(at(ctx, t0, 2*lease), h, "alice", "pay-x", "pen")
		wantHTTPStatus(t, "another body after", r, http.StatusUnprocessableEntity)
		// Another caller's key of the same name is another request.
		other, _ := stepsCall(at(ctx, t0, 2*lease), h, "bob", "pay-x", "pen")
		wantHTTPStatus(t, "another caller", other, http.StatusCreated)
		r, _ = stepsCall(at(ctx, t0, 2*lease), h, "alice", "pay-x", "book")
		sameAnswer(t, "replay", first, r)
		wantLedgerOnce(t, ctx, db, "alice:pay-x")
		svc.effectsOnce(t, 4)
	})

	// Duplicates race one request: one runs the steps, the others are
	// answered 409 while it runs, and all get its answer after.
	t.Run("ConcurrentDuplicates", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		svc := newOutsideService(t)
		gate := make(chan struct{})
		_, h := newStepsHandler(t, db, httpPaymentOp(db, svc, &stepFaults{}, lease, gate))
		const n = 12
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created []reply
			busy    int
		)
		started := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i > 0 {
					<-started
				}
				r, p := stepsCall(ctx, h, "alice", "race", "book")
				if p != nil {
					t.Errorf("panicked: %v", p)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch r.status {
				case http.StatusCreated:
					created = append(created, r)
				case http.StatusConflict:
					if p := r.problem(t); p.Code != httpidem.CodeInProgress {
						t.Errorf("409 with %+v", p)
					}
					if busy++; busy == n-1 {
						close(gate) // every duplicate was told 409: let the first go on
					}
				default:
					t.Errorf("status %d: %s", r.status, r.body)
				}
			}()
			if i == 0 {
				// The first request holds the key (waiting at the charge
				// step) before the duplicates are sent.
				waitFor(t, func() bool {
					n, err := db.Pool().LedgerCountByRef(ctx, "alice:race/reserve")
					return err == nil && n == 1
				})
				close(started)
			}
		}
		wg.Wait()
		if len(created) != 1 || busy != n-1 {
			t.Fatalf("%d answered 201, %d answered 409; want 1 and %d", len(created), busy, n-1)
		}
		r, _ := stepsCall(ctx, h, "alice", "race", "book")
		sameAnswer(t, "after the race", created[0], r)
		wantLedgerOnce(t, ctx, db, "alice:race")
		svc.effectsOnce(t, 2)
	})
}

// runHTTPIdemStepsApart: the keys of requests run as steps are apart from
// dedupe's operations of several steps, and so are their resumers: each
// finishes its own stuck keys, both running at once (one election would
// leave the other's keys stuck).
func runHTTPIdemStepsApart[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const lease = time.Minute
	ctx := ctxT(t)
	db := f(t, 0)
	svc := newOutsideService(t)
	faults := &stepFaults{}
	httpOp := httpPaymentOp(db, svc, faults, lease, nil)
	m, h := newStepsHandler(t, db, httpOp)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	dedupeOp := paymentOp(db, svc, faults, lease)
	t0 := clockBase()

	runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
	faults.fault, faults.cancel = &stepFault{step: "order", mode: "cancel"}, cancel
	stepsCall(runCtx, h, "alice", "pay-1", "book")
	cancel()
	// The same scope and key as the request's, stopped too.
	req := dedupe.Request{Scope: "k:alice", Key: "pay-1", Fingerprint: []byte("fp")}
	runCtx, cancel = context.WithCancel(at(ctx, t0, 0))
	faults.fault, faults.cancel = &stepFault{step: "order", mode: "cancel"}, cancel
	_, err = store.RunSteps(runCtx, req, []byte("dd"), dedupeOp)
	cancel()
	wantErr(t, "stopped dedupe run", err, context.Canceled)

	later := at(ctx, t0, 2*lease)
	cctx, stop := context.WithCancel(later)
	var wg sync.WaitGroup
	for _, run := range []func() error{
		func() error { return store.ResumeEvery(cctx, 10*time.Millisecond, 3, dedupeOp) },
		func() error { return m.ResumeEvery(cctx, 10*time.Millisecond, 3, httpOp) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = run() }()
	}
	// Both finished by their resumers: the request replays, the
	// dedupe run is done (a 409 or ErrInProgress until then). Asked as of
	// a time within the first lease, so that the asking never takes a key
	// over itself.
	within := at(ctx, t0, lease/2)
	waitFor(t, func() bool {
		r, _ := stepsCall(within, h, "alice", "pay-1", "book")
		if r.status != http.StatusConflict {
			wantHTTPStatus(t, "request after the resumer", r, http.StatusCreated)
			if !r.replayed() {
				t.Fatal("request after the resumer was not replayed")
			}
		}
		res, err := store.RunSteps(within, req, []byte("dd"), dedupeOp)
		if err != nil && !errors.Is(err, sqlonce.ErrInProgress) || err == nil && !res.AlreadyDone() {
			t.Fatalf("dedupe run after the resumer: %v, %v", res, err)
		}
		return r.status == http.StatusCreated && err == nil
	})
	stop()
	wg.Wait()
	wantLedgerOnce(t, ctx, db, "alice:pay-1")
	wantLedgerOnce(t, ctx, db, "dd")
}

// waitFor polls cond until it holds, failing after ten seconds.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
