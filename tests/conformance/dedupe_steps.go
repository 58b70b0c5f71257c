package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// outsideService is the outside system of an operation's outside steps: an
// HTTP server that dedupes by the Idempotency-Key header, as a payment
// provider does. It counts the calls it gets and the effects it makes.
type outsideService struct {
	srv     *httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	effects map[string]int // effects per idempotency key
}

func newOutsideService(t testing.TB) *outsideService {
	o := &outsideService{effects: map[string]int{}}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.calls.Add(1)
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "no key", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		if o.effects[key] == 0 {
			o.effects[key] = 1
		}
		o.mu.Unlock()
		fmt.Fprintf(w, "%s_%s", strings.TrimPrefix(r.URL.Path, "/"), key[:12])
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *outsideService) call(ctx context.Context, what, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.srv.URL+"/"+what, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := o.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("outside service: %s", resp.Status)
	}
	return b, err
}

// effectsOnce fails unless every key the service saw made one effect, and
// it saw want keys.
func (o *outsideService) effectsOnce(t testing.TB, want int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.effects) != want {
		t.Fatalf("outside service saw %d keys, want %d", len(o.effects), want)
	}
	for k, n := range o.effects {
		if n != 1 {
			t.Fatalf("outside service: key %s made %d effects", k, n)
		}
	}
}

// stepFault is where a run of the payment operation is made to stop.
type stepFault struct {
	step   string // the step it strikes
	inside bool   // after the step's effect, before it returns; else at its start
	mode   string // "cancel", "panic", "kill" (cut the connection), "error"
}

// stopCases lists the faults a StopEverywhere case strikes runs with:
// each step, at its start and inside it (after its effect), stopped by
// each mode — a cancelled context, a panic, an error, and for a database
// step a cut connection (not on SQLite, which has none). Under -short
// each step meets each mode once, alternately at its start and inside
// it, which still strikes every step at both points and with every mode,
// in half the runs.
func stopCases(steps []string, isDB map[string]bool, dialect string) []stepFault {
	var cases []stepFault
	for si, step := range steps {
		modes := []string{"cancel", "panic", "error"}
		if isDB[step] && dialect != "sqlite" {
			modes = append(modes, "kill")
		}
		for _, inside := range []bool{false, true} {
			for mi, mode := range modes {
				if testing.Short() && (mi+si)%2 == 1 != inside {
					continue
				}
				cases = append(cases, stepFault{step: step, inside: inside, mode: mode})
			}
		}
	}
	return cases
}

type stepFaults struct {
	mu     sync.Mutex
	fault  *stepFault
	cancel context.CancelFunc
}

var errInjected = errors.New("injected step failure")

// strike stops the run if the fault is armed for step at this point,
// once.
func strike[TTx any](ctx context.Context, f *stepFaults, db harness.DB[TTx], tx *TTx, step string, inside bool) error {
	f.mu.Lock()
	fault := f.fault
	if fault == nil || fault.step != step || fault.inside != inside {
		f.mu.Unlock()
		return nil
	}
	f.fault = nil
	f.mu.Unlock()
	switch fault.mode {
	case "panic":
		panic(fmt.Sprintf("injected panic in step %s", step))
	case "cancel":
		f.cancel()
		return ctx.Err()
	case "kill":
		id, err := db.ConnID(context.Background(), *tx)
		if err != nil {
			return err
		}
		if err := db.Kill(context.Background(), id); err != nil {
			return err
		}
		return nil // the next statement finds the connection cut
	}
	return errInjected
}

// paymentOp is the payment of the README: reserve stock (database), charge
// the card (outside), write the order (database), send the receipt
// (outside). Database steps write one ledger row each, ref "<key>/<step>".
func paymentOp[TTx any](db harness.DB[TTx], svc *outsideService, f *stepFaults, lease time.Duration) *dedupe.Operation[TTx] {
	inTx := func(name string, result func(st dedupe.StepState) string) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			if err := strike(ctx, f, db, &tx, name, false); err != nil {
				return nil, err
			}
			if err := db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/"+name, 1); err != nil {
				return nil, err
			}
			if err := strike(ctx, f, db, &tx, name, true); err != nil {
				return nil, err
			}
			return []byte(result(st)), nil
		}}
	}
	outside := func(name string) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
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
			return b, nil
		}}
	}
	return &dedupe.Operation[TTx]{
		Name:  "payment",
		Lease: lease,
		Steps: []dedupe.Step[TTx]{
			inTx("reserve", func(dedupe.StepState) string { return "reserved" }),
			outside("charge"),
			inTx("order", func(st dedupe.StepState) string {
				charge, _ := st.Result("charge")
				return fmt.Sprintf(`{"order":%q,"charge":%q}`, st.Input, charge)
			}),
			outside("email"),
		},
	}
}

// resumeHook calls before ahead of the first StepResume, once.
type resumeHook[TTx any] struct {
	driver.Engine[TTx]
	once   *sync.Once
	before func()
}

func (e resumeHook[TTx]) StepResume(ctx context.Context, tx TTx, k driver.Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	e.once.Do(e.before)
	return e.Engine.StepResume(ctx, tx, k, token, read, recovery, lease, now)
}

// readHook calls after once the first transaction (or statement) that
// read a step key with StepGet has ended, so that it holds no lock.
type readHook[TTx any] struct {
	driver.Engine[TTx]
	read  *atomic.Bool
	once  *sync.Once
	after func()
}

func (e readHook[TTx]) StepGet(ctx context.Context, tx TTx, k driver.Key, now time.Time) (driver.StepRow, bool, error) {
	e.read.Store(true)
	return e.Engine.StepGet(ctx, tx, k, now)
}

func (e readHook[TTx]) ended() {
	if e.read.Load() {
		e.once.Do(e.after)
	}
}

func (e readHook[TTx]) InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	defer e.ended()
	return e.Engine.InTx(ctx, fn)
}

// Capabilities are the engine's, with its Autocommitter's transactions
// (statements) ended as InTx's are.
func (e readHook[TTx]) Capabilities() driver.Capabilities[TTx] {
	c := e.Engine.Capabilities()
	if c.Autocommitter != nil {
		c.Autocommitter = readHookAuto[TTx]{e, c.Autocommitter}
	}
	return c
}

type readHookAuto[TTx any] struct {
	e readHook[TTx]
	a driver.Autocommitter[TTx]
}

func (a readHookAuto[TTx]) Autocommit(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	defer a.e.ended()
	return a.a.Autocommit(ctx, fn)
}

type readHookDriver[TTx any] struct{ e readHook[TTx] }

func (d readHookDriver[TTx]) Engine() driver.Engine[TTx] { return d.e }

type hookDriver[TTx any] struct{ e resumeHook[TTx] }

func (d hookDriver[TTx]) Engine() driver.Engine[TTx] { return d.e }

// runCaught runs RunSteps and turns a panic into an error.
func runCaught[TTx any](ctx context.Context, s *dedupe.Store[TTx], req dedupe.Request, input []byte, op *dedupe.Operation[TTx]) (res sqlonce.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return s.RunSteps(ctx, req, input, op)
}

// wantLedgerOnce fails unless each of key's database steps wrote one row.
func wantLedgerOnce[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], key string) {
	t.Helper()
	for _, step := range []string{"reserve", "order"} {
		n, err := db.Pool().LedgerCountByRef(ctx, key+"/"+step)
		must(t, err)
		if n != 1 {
			t.Fatalf("key %s: step %s wrote %d ledger rows, want 1", key, step, n)
		}
	}
}

// namedOp is an operation named name of two steps: a database step that
// writes a ledger row with ref "<input>/<name>", then an outside step
// that waits for gate (when not nil) and answers "<name>:<input>". ran
// counts the runs of its steps.
func namedOp[TTx any](db harness.DB[TTx], name string, ran *atomic.Int64, gate <-chan struct{}) *dedupe.Operation[TTx] {
	return &dedupe.Operation[TTx]{Name: name, Lease: time.Minute, Steps: []dedupe.Step[TTx]{
		{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			ran.Add(1)
			return nil, db.Tx(tx).LedgerInsert(ctx, string(st.Input)+"/"+name, 1)
		}},
		{Name: "answer", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			ran.Add(1)
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte(name + ":" + string(st.Input)), nil
		}},
	}}
}

func countOp(won map[string]int, op int) (n int) {
	for _, w := range won {
		if w == op {
			n++
		}
	}
	return n
}

// wantOpLedger fails unless operation name wrote want ledger rows for key.
func wantOpLedger[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], key, name string, want int64) {
	t.Helper()
	n, err := db.Pool().LedgerCountByRef(ctx, key+"/"+name)
	must(t, err)
	if n != want {
		t.Fatalf("key %s: operation %s wrote %d ledger rows, want %d", key, name, n, want)
	}
}

// wantKeyReuse fails t, and goes on, unless RunSteps answered
// sqlonce.ErrKeyReuse, and nothing else: no outcome, no response.
func wantKeyReuse(t testing.TB, what string, res sqlonce.Result, err error) {
	t.Helper()
	if !errors.Is(err, sqlonce.ErrKeyReuse) || res.Outcome != 0 || res.Response != nil {
		t.Errorf("%s: %v (response %q), %v; want ErrKeyReuse and nothing else", what, res, res.Response, err)
	}
}

func runDedupeSteps[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("InspectForget", func(t *testing.T) { stepsInspectForget(t, f) })
	t.Run("Redrive", func(t *testing.T) { stepsRedrive(t, f) })
	runStepsFirstStep(t, f)
	runStepsContract(t, f)
	const lease = time.Minute
	steps := []string{"reserve", "charge", "order", "email"}
	isDB := map[string]bool{"reserve": true, "order": true}

	for _, by := range []string{"Retry", "Resumer"} {
		t.Run("StopEverywhereThen"+by, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			svc := newOutsideService(t)
			faults := &stepFaults{}
			op := paymentOp(db, svc, faults, lease)
			t0 := clockBase()
			clock := time.Duration(0)
			cases := stopCases(steps, isDB, db.Dialect())
			for i, c := range cases {
				key := fmt.Sprintf("pay-%d", i)
				req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte("fp-" + key)}
				runCtx, cancel := context.WithCancel(at(ctx, t0, clock))
				faults.mu.Lock()
				fault := c
				faults.fault, faults.cancel = &fault, cancel
				faults.mu.Unlock()
				_, err := runCaught(runCtx, s, req, []byte(key), op)
				cancel()
				if err == nil {
					t.Fatalf("%+v: the run did not stop", c)
				}
				// The lease lapses (an error releases it at once).
				clock += lease + time.Second
				var res sqlonce.Result
				switch by {
				case "Retry":
					res, err = s.RunSteps(at(ctx, t0, clock), req, []byte(key), op)
					if err != nil || !res.FirstRun() {
						t.Fatalf("%+v: retry: %v, %v", c, res, err)
					}
				case "Resumer":
					done, failed, err := s.ResumeStuck(at(ctx, t0, clock), 3, op)
					if err != nil || done != 1 || failed != 0 {
						t.Fatalf("%+v: resumer: %d done, %d failed, %v", c, done, failed, err)
					}
				}
				replay, err := s.RunSteps(at(ctx, t0, clock), req, []byte(key), op)
				if err != nil || !replay.AlreadyDone() {
					t.Fatalf("%+v: replay: %v, %v", c, replay, err)
				}
				if res.FirstRun() && !bytes.Equal(replay.Response, res.Response) {
					t.Fatalf("%+v: replay %q, first answer %q", c, replay.Response, res.Response)
				}
				want := fmt.Sprintf(`email_%s`, dedupe.StepKey(req.Scope, key, "email")[:12])
				if string(replay.Response) != want {
					t.Fatalf("%+v: response %q, want %q", c, replay.Response, want)
				}
				wantLedgerOnce(t, ctx, db, key)
				clock += time.Second
			}
			svc.effectsOnce(t, 2*len(cases))
			t.Logf("%d stopped runs, then the %s: outside service got %d calls for %d keys", len(cases), strings.ToLower(by), svc.calls.Load(), 2*len(cases))
		})
	}

	t.Run("KeyReuseAndInProgress", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "pay-x", Fingerprint: []byte("a")}
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		faults.fault, faults.cancel = &stepFault{step: "order", mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("pay-x"), op)
		wantErr(t, "stopped run", err, context.Canceled)
		cancel()
		_, err = s.RunSteps(at(ctx, t0, time.Second), req, []byte("pay-x"), op)
		wantErr(t, "retry within the lease", err, sqlonce.ErrInProgress)
		other := req
		other.Fingerprint = []byte("b")
		_, err = s.RunSteps(at(ctx, t0, 2*lease), other, []byte("pay-x"), op)
		wantErr(t, "other body", err, sqlonce.ErrKeyReuse)
		res, err := s.RunSteps(at(ctx, t0, 2*lease), req, []byte("pay-x"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("resume: %v, %v", res, err)
		}
		_, err = s.RunSteps(at(ctx, t0, 2*lease), other, []byte("pay-x"), op)
		wantErr(t, "other body after", err, sqlonce.ErrKeyReuse)
		wantLedgerOnce(t, ctx, db, "pay-x")
		svc.effectsOnce(t, 2)
	})

	// An expired key counts as absent: done or stopped, it starts anew.
	t.Run("ExpiredKeyStartsAnew", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Hour))
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "exp", Fingerprint: []byte("a")}
		res, err := s.RunSteps(at(ctx, t0, 0), req, []byte("exp"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("first: %v, %v", res, err)
		}
		// Expired and done, with another body: a new operation.
		other := req
		other.Fingerprint = []byte("b")
		res, err = s.RunSteps(at(ctx, t0, 2*time.Hour), other, []byte("exp"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("after expiry: %v, %v", res, err)
		}
		// Stopped, then expired: starts anew too.
		runCtx, cancel := context.WithCancel(at(ctx, t0, 4*time.Hour))
		faults.fault, faults.cancel = &stepFault{step: "order", mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("exp"), op)
		cancel()
		wantErr(t, "stopped", err, context.Canceled)
		res, err = s.RunSteps(at(ctx, t0, 6*time.Hour), req, []byte("exp"), op)
		if err != nil || !res.FirstRun() {
			t.Fatalf("after a stopped run expired: %v, %v", res, err)
		}
		for step, want := range map[string]int64{"reserve": 4, "order": 3} {
			n, err := db.Pool().LedgerCountByRef(ctx, "exp/"+step)
			must(t, err)
			if n != want {
				t.Fatalf("step %s wrote %d rows, want %d (one per operation started)", step, n, want)
			}
		}
		// Another operation on a key stopped mid-way: refused.
		runCtx, cancel = context.WithCancel(at(ctx, t0, 8*time.Hour))
		faults.fault, faults.cancel = &stepFault{step: "charge", mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("exp"), op)
		cancel()
		wantErr(t, "stopped", err, context.Canceled)
		renamed := *op
		renamed.Name = "refund"
		_, err = s.RunSteps(at(ctx, t0, 8*time.Hour+2*lease), req, []byte("exp"), &renamed)
		wantErr(t, "another operation", err, sqlonce.ErrKeyReuse)
	})

	// A key is its operation's: another operation (another Name) with the
	// same scope, key and fingerprint is refused with ErrKeyReuse in every
	// state of the key, and its steps never run; it is never answered with
	// the first operation's response (it was, AlreadyDone, once that one
	// was done), nor told to wait for it (ErrInProgress, while it ran).
	t.Run("AnotherOperation", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		var checkoutRan, refundRan atomic.Int64
		gate := make(chan struct{})
		checkout := namedOp(db, "checkout", &checkoutRan, gate)
		refund := namedOp(db, "refund", &refundRan, nil)
		req := dedupe.Request{Scope: "steps", Key: "order-1", Fingerprint: []byte("same body")}
		input := []byte("order-1")

		// In progress: checkout's run holds the key, waiting at its
		// outside step.
		first := make(chan error, 1)
		go func() {
			_, err := s.RunSteps(ctx, req, input, checkout)
			first <- err
		}()
		for checkoutRan.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		res, err := s.RunSteps(ctx, req, input, refund)
		wantKeyReuse(t, "refund while checkout runs", res, err)
		_, err = s.RunSteps(ctx, req, input, checkout)
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Errorf("checkout while checkout runs: %v, want ErrInProgress", err)
		}
		close(gate)
		must(t, <-first)

		// Done.
		res, err = s.RunSteps(ctx, req, input, refund)
		wantKeyReuse(t, "refund after checkout", res, err)
		res, err = s.RunSteps(ctx, req, input, checkout)
		if err != nil || !res.AlreadyDone() || string(res.Response) != "checkout:order-1" {
			t.Fatalf("checkout again: %v %q, %v; want AlreadyDone %q", res, res.Response, err, "checkout:order-1")
		}
		// The resumer, given both operations, finds nothing to do.
		if done, failed, err := s.ResumeStuck(ctx, 3, checkout, refund); err != nil || done != 0 || failed != 0 {
			t.Fatalf("resumer: %d done, %d given up, %v", done, failed, err)
		}
		if n := refundRan.Load(); n != 0 {
			t.Errorf("refund's steps ran %d times, want never", n)
		}
		wantOpLedger(t, ctx, db, "order-1", "checkout", 1)
		wantOpLedger(t, ctx, db, "order-1", "refund", 0)

		// Stopped: checkout's run failed at its outside step, its lease
		// released; then given up by the resumer.
		t0 := clockBase()
		failing := namedOp(db, "checkout", &checkoutRan, nil)
		failing.Steps[1].Outside = func(context.Context, dedupe.StepState) ([]byte, error) { return nil, errInjected }
		req2 := dedupe.Request{Scope: "steps", Key: "order-2", Fingerprint: []byte("same body")}
		_, err = s.RunSteps(at(ctx, t0, 0), req2, []byte("order-2"), failing)
		wantErr(t, "checkout that fails", err, errInjected)
		res, err = s.RunSteps(at(ctx, t0, time.Second), req2, []byte("order-2"), refund)
		wantKeyReuse(t, "refund after checkout stopped", res, err)
		if done, failed, err := s.ResumeStuck(at(ctx, t0, 2*time.Second), 1, failing, refund); err != nil || done != 0 || failed != 1 {
			t.Fatalf("resumer: %d done, %d given up, %v; want one given up", done, failed, err)
		}
		res, err = s.RunSteps(at(ctx, t0, 3*time.Second), req2, []byte("order-2"), refund)
		wantKeyReuse(t, "refund after checkout was given up", res, err)
		_, err = s.RunSteps(at(ctx, t0, 3*time.Second), req2, []byte("order-2"), failing)
		wantErr(t, "checkout after it was given up", err, dedupe.ErrOperationFailed)
		if n := refundRan.Load(); n != 0 {
			t.Fatalf("refund's steps ran %d times, want never", n)
		}
		wantOpLedger(t, ctx, db, "order-2", "checkout", 1)
		wantOpLedger(t, ctx, db, "order-2", "refund", 0)
	})

	// Goroutines racing two operations on each key: one operation's
	// effects per key, once; the other's callers all get ErrKeyReuse.
	t.Run("AnotherOperationRace", func(t *testing.T) {
		ctx := ctxT(t)
		const workers, keys = 16, 8
		db := f(t, workers+4)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		var ran [2]atomic.Int64
		ops := [2]*dedupe.Operation[TTx]{namedOp(db, "checkout", &ran[0], nil), namedOp(db, "refund", &ran[1], nil)}
		type answer struct {
			key  string
			op   int
			resp string
			err  error
		}
		answers := make(chan answer, workers*keys)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := w % 2
				for k := range keys {
					key := fmt.Sprintf("race-op-%d", (k+w)%keys)
					req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte("same body")}
					for {
						res, err := s.RunSteps(ctx, req, []byte(key), ops[op])
						if errors.Is(err, sqlonce.ErrInProgress) {
							time.Sleep(time.Millisecond)
							continue
						}
						if err == nil && res.Response == nil {
							err = fmt.Errorf("no response: %v", res)
						}
						answers <- answer{key: key, op: op, resp: string(res.Response), err: err}
						break
					}
				}
			}()
		}
		wg.Wait()
		close(answers)
		won := map[string]int{}
		var byKey []answer
		for a := range answers {
			byKey = append(byKey, a)
			if a.err == nil {
				if w, ok := won[a.key]; ok && w != a.op {
					t.Fatalf("key %s: both operations answered", a.key)
				}
				won[a.key] = a.op
				if want := ops[a.op].Name + ":" + a.key; a.resp != want {
					t.Fatalf("key %s: %s answered %q, want %q", a.key, ops[a.op].Name, a.resp, want)
				}
			}
		}
		for _, a := range byKey {
			w, ok := won[a.key]
			switch {
			case !ok:
				t.Fatalf("key %s: no operation answered", a.key)
			case a.op != w && !errors.Is(a.err, sqlonce.ErrKeyReuse):
				t.Fatalf("key %s: %s, which lost the key to %s: %q, %v; want ErrKeyReuse", a.key, ops[a.op].Name, ops[w].Name, a.resp, a.err)
			case a.op == w && a.err != nil:
				t.Fatalf("key %s: %s, which won the key: %v", a.key, ops[a.op].Name, a.err)
			}
		}
		for k := range keys {
			key := fmt.Sprintf("race-op-%d", k)
			w := won[key]
			wantOpLedger(t, ctx, db, key, ops[w].Name, 1)
			wantOpLedger(t, ctx, db, key, ops[1-w].Name, 0)
		}
		t.Logf("keys won by checkout and refund: %d and %d; steps run: %d and %d", keys-countOp(won, 1), countOp(won, 1), ran[0].Load(), ran[1].Load())
	})

	t.Run("GiveUpAfterAttempts", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		var tries atomic.Int64
		op := &dedupe.Operation[TTx]{Name: "doomed", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				return nil, db.Tx(tx).LedgerInsert(ctx, "doomed/write", 1)
			}},
			{Name: "fail", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				tries.Add(1)
				return nil, errInjected
			}},
			{Name: "after", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
				return nil, db.Tx(tx).LedgerInsert(ctx, "doomed/after", 1)
			}},
		}}
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "doomed"}
		_, err = s.RunSteps(at(ctx, t0, 0), req, nil, op)
		wantErr(t, "first run", err, errInjected)
		for i := 1; i <= 3; i++ {
			done, failed, err := s.ResumeStuck(at(ctx, t0, time.Duration(i)*time.Second), 3, op)
			switch {
			case i < 3 && (done != 0 || failed != 0 || !errors.Is(err, errInjected)):
				t.Fatalf("round %d: %d done, %d failed, %v", i, done, failed, err)
			case i == 3 && (done != 0 || failed != 1 || err != nil):
				t.Fatalf("round %d: %d done, %d failed, %v", i, done, failed, err)
			}
		}
		if n := tries.Load(); n != 3 {
			t.Fatalf("the failing step ran %d times, want 3", n)
		}
		_, err = s.RunSteps(at(ctx, t0, time.Hour), req, nil, op)
		wantErr(t, "after giving up", err, dedupe.ErrOperationFailed)
		if !strings.Contains(err.Error(), `after 3 attempts, stopped at step "fail": `+errInjected.Error()) {
			t.Fatalf("after giving up: %v; want the attempts, the step and its error", err)
		}
		// InspectSteps tells why, where, after how many attempts and when
		// (the database's clock: pinned at the third round).
		info, err := s.InspectSteps(at(ctx, t0, time.Hour), "steps", "doomed")
		must(t, err)
		if info.State != dedupe.KeyDone || info.Failed != errInjected.Error() || info.Operation != "doomed" || info.Done != nil ||
			info.Attempts != 3 || info.FailedStep != "fail" || !info.FailedAt.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("inspect a given-up operation: %+v; want failed at step fail after 3 attempts at %v", info, t0.Add(3*time.Second))
		}
		if n, err := db.Pool().LedgerCountByRef(ctx, "doomed/after"); err != nil || n != 0 {
			t.Fatalf("the step after the failing one wrote %d rows (%v), want 0", n, err)
		}
		n, err := db.Pool().LedgerCountByRef(ctx, "doomed/write")
		must(t, err)
		if n != 1 {
			t.Fatalf("the database step wrote %d rows, want 1", n)
		}
	})

	// The resumer finishes a key under the TTL its first call asked for,
	// longer than the Store's: a repeat within that TTL replays the
	// response rather than running the operation again.
	t.Run("ResumerKeepsTheRequestTTL", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Hour))
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "long-ttl", TTL: 10 * time.Hour}
		runCtx, cancel := context.WithCancel(at(ctx, t0, 0))
		faults.fault, faults.cancel = &stepFault{step: "charge", inside: true, mode: "cancel"}, cancel
		_, err = s.RunSteps(runCtx, req, []byte("long-ttl"), op)
		cancel()
		wantErr(t, "stopped run", err, context.Canceled)
		done, failed, err := s.ResumeStuck(at(ctx, t0, 2*lease), 3, op)
		if err != nil || done != 1 || failed != 0 {
			t.Fatalf("resumer: %d done, %d failed, %v", done, failed, err)
		}
		// Past the Store's TTL from the completion, within the request's.
		res, err := s.RunSteps(at(ctx, t0, 5*time.Hour), req, []byte("long-ttl"), op)
		if err != nil || !res.AlreadyDone() {
			t.Fatalf("repeat within the request's TTL: %v, %v; want AlreadyDone", res, err)
		}
		wantLedgerOnce(t, ctx, db, "long-ttl")
	})

	// The resumer reads a key past its lease and decides to give it up;
	// before it does, the run, alive past its lease, records a step. The
	// resumer must not give up on what it read: the run goes on and
	// finishes.
	t.Run("GiveUpRereads", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		runner, err := dedupe.New(db.Driver())
		must(t, err)
		cRead, aRecorded, cDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
		hook := readHook[TTx]{Engine: db.Driver().Engine(), read: new(atomic.Bool), once: new(sync.Once), after: func() {
			close(cRead)
			<-aRecorded
		}}
		resumer, err := dedupe.New(readHookDriver[TTx]{hook})
		must(t, err)
		op := &dedupe.Operation[TTx]{Name: "alive", Lease: lease, Steps: []dedupe.Step[TTx]{
			{Name: "first", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				<-cRead
				return []byte("first"), nil
			}},
			{Name: "second", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				close(aRecorded) // the first step is recorded
				<-cDone
				return []byte("second"), nil
			}},
		}}
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "alive"}
		aDone := make(chan error, 1)
		go func() {
			_, err := runner.RunSteps(at(ctx, t0, 0), req, nil, op)
			aDone <- err
		}()
		for {
			row, ok, err := db.Key(ctx, "steps", "alive")
			must(t, err)
			if ok && row.State == 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		// Past the run's lease at the resumer's clock; one attempt
		// allowed, so the key read is one to give up.
		done, failed, err := resumer.ResumeStuck(at(ctx, t0, 2*lease), 1, op)
		close(cDone)
		if err != nil || done != 0 || failed != 0 {
			t.Fatalf("resumer: %d done, %d given up, %v; want neither", done, failed, err)
		}
		if err := <-aDone; err != nil {
			t.Fatalf("the run: %v", err)
		}
		res, err := runner.RunSteps(at(ctx, t0, time.Second), req, nil, op)
		if err != nil || !res.AlreadyDone() || string(res.Response) != "second" {
			t.Fatalf("repeat: %v, %v; want AlreadyDone %q", res, err, "second")
		}
	})

	// A key stopped after what is now the operation's last step (the
	// operation lost its later steps since): the resume records that
	// step's result as the response, so that a repeat replays it rather
	// than finding the key leased.
	t.Run("NoStepLeft", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		write := dedupe.Step[TTx]{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			return []byte("written"), db.Tx(tx).LedgerInsert(ctx, "shrunk/write", 1)
		}}
		long := &dedupe.Operation[TTx]{Name: "shrunk", Lease: lease, Steps: []dedupe.Step[TTx]{write,
			{Name: "gone", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
				return nil, errInjected
			}},
		}}
		short := &dedupe.Operation[TTx]{Name: "shrunk", Lease: lease, Steps: []dedupe.Step[TTx]{write}}
		t0 := clockBase()
		req := dedupe.Request{Scope: "steps", Key: "shrunk"}
		_, err = s.RunSteps(at(ctx, t0, 0), req, nil, long)
		wantErr(t, "first run", err, errInjected)
		res, err := s.RunSteps(at(ctx, t0, time.Second), req, nil, short)
		if err != nil || !res.FirstRun() || string(res.Response) != "written" {
			t.Fatalf("resume with no step left: %v, %v", res, err)
		}
		replay, err := s.RunSteps(at(ctx, t0, 2*time.Second), req, nil, short)
		if err != nil || !replay.AlreadyDone() || string(replay.Response) != "written" {
			t.Fatalf("repeat: %v, %v; want AlreadyDone %q", replay, err, "written")
		}
		n, err := db.Pool().LedgerCountByRef(ctx, "shrunk/write")
		must(t, err)
		if n != 1 {
			t.Fatalf("the database step wrote %d rows, want 1", n)
		}
	})

	t.Run("Race", func(t *testing.T) {
		ctx := ctxT(t)
		const workers, keys = 16, 4
		db := f(t, workers+4)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		svc := newOutsideService(t)
		op := paymentOp(db, svc, &stepFaults{}, lease)
		var first atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers*keys)
		answers := sync.Map{}
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					key := fmt.Sprintf("race-%d", (k+w)%keys)
					req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
					for {
						res, err := s.RunSteps(ctx, req, []byte(key), op)
						if errors.Is(err, sqlonce.ErrInProgress) {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						if res.FirstRun() {
							first.Add(1)
						}
						if prev, loaded := answers.LoadOrStore(key, string(res.Response)); loaded && prev != string(res.Response) {
							errs <- fmt.Errorf("key %s answered %q and %q (%v)", key, prev, res.Response, res)
						}
						break
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := first.Load(); n != keys {
			t.Fatalf("%d first runs, want %d", n, keys)
		}
		for k := range keys {
			wantLedgerOnce(t, ctx, db, fmt.Sprintf("race-%d", k))
		}
		svc.effectsOnce(t, 2*keys)
	})

	// Runs stopped inside the charge, then retries from many goroutines
	// and two resumers, all at once, past the leases.
	t.Run("RaceWithResumer", func(t *testing.T) {
		ctx := ctxT(t)
		const workers, keys, resumers = 12, 6, 2
		db := f(t, workers+resumers+4)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, lease)
		t0 := clockBase()
		for k := range keys {
			key := fmt.Sprintf("stuck-%d", k)
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
		errs := make(chan error, workers*keys+resumers)
		answers := sync.Map{}
		for range resumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					done, _, err := s.ResumeStuck(later, 3, op)
					if err != nil && !errors.Is(err, sqlonce.ErrLeaseLost) {
						errs <- fmt.Errorf("resumer: %w", err)
						return
					}
					finished.Add(int64(done))
				}
			}()
		}
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range keys {
					key := fmt.Sprintf("stuck-%d", (k+w)%keys)
					req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
					for {
						res, err := s.RunSteps(later, req, []byte(key), op)
						if errors.Is(err, sqlonce.ErrInProgress) || errors.Is(err, sqlonce.ErrLeaseLost) {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						if res.FirstRun() {
							first.Add(1)
						}
						if prev, loaded := answers.LoadOrStore(key, string(res.Response)); loaded && prev != string(res.Response) {
							errs <- fmt.Errorf("key %s answered %q and %q", key, prev, res.Response)
						}
						break
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
			t.Fatalf("%d resumed by retries, %d by resumers, want %d in all", first.Load(), finished.Load(), keys)
		}
		for k := range keys {
			wantLedgerOnce(t, ctx, db, fmt.Sprintf("stuck-%d", k))
		}
		svc.effectsOnce(t, 2*keys)
		t.Logf("%d keys: %d finished by retries, %d by resumers; outside service got %d calls", keys, first.Load(), finished.Load(), svc.calls.Load())
	})

	// A run whose lease lapsed commits a database step after a retry read
	// the key and before the retry takes it over: the retry must not write
	// back the recovery point it read, which lacks that step.
	t.Run("ResumeAfterAStepCommitted", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		slow, err := dedupe.New(db.Driver())
		must(t, err)
		bRead, aCommitted := make(chan struct{}), make(chan struct{})
		hooked := resumeHook[TTx]{Engine: db.Driver().Engine(), once: new(sync.Once), before: func() {
			close(bRead)
			<-aCommitted
		}}
		retrier, err := dedupe.New(hookDriver[TTx]{hooked})
		must(t, err)
		svc := newOutsideService(t)
		t0 := clockBase()
		op := paymentOp(db, svc, &stepFaults{}, lease)
		// Run A: its reserve step waits until B has read the key (lapsed
		// at B's clock), then commits; its charge step tells B so.
		aOp := *op
		aOp.Steps = slices.Clone(op.Steps)
		reserve, charge := aOp.Steps[0].InTx, aOp.Steps[1].Outside
		aOp.Steps[0].InTx = func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			<-bRead
			return reserve(ctx, tx, st)
		}
		aOp.Steps[1].Outside = func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			select {
			case <-aCommitted:
			default:
				close(aCommitted)
			}
			return charge(ctx, st)
		}
		req := dedupe.Request{Scope: "steps", Key: "late-step", Fingerprint: []byte("fp")}
		// A first run stops in its first step (a database step: its
		// claim, committed with that step, is then recorded alone, its
		// lease left to lapse). A resumes it, then stops before its
		// first step; its lease lapses at B's clock.
		stopCtx, stop := context.WithCancel(at(ctx, t0, 0))
		stopOp := *op
		stopOp.Steps = slices.Clone(op.Steps)
		stopOp.Steps[0].InTx = func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			stop()
			return nil, ctx.Err()
		}
		_, err = slow.RunSteps(stopCtx, req, []byte("late-step"), &stopOp)
		wantErr(t, "stopped run", err, context.Canceled)
		stoppedRow, ok, err := db.Key(ctx, "steps", "late-step")
		must(t, err)
		if !ok {
			t.Fatal("the stopped run left no key")
		}
		aDone := make(chan error, 1)
		go func() {
			_, err := slow.RunSteps(at(ctx, t0, lease+time.Second), req, []byte("late-step"), &aOp)
			aDone <- err
		}()
		// B starts once A holds the key.
		for {
			row, ok, err := db.Key(ctx, "steps", "late-step")
			must(t, err)
			if ok && row.State == 2 && row.Token != stoppedRow.Token {
				break
			}
			time.Sleep(time.Millisecond)
		}
		// B resumes after A's reserve (FirstRun), or finds A finished
		// (AlreadyDone), or still moving (ErrInProgress).
		_, err = retrier.RunSteps(at(ctx, t0, 3*lease), req, []byte("late-step"), op)
		if err != nil && !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("retry: %v", err)
		}
		if err := <-aDone; err != nil && !errors.Is(err, sqlonce.ErrLeaseLost) {
			t.Fatalf("run A: %v", err)
		}
		res, err := retrier.RunSteps(at(ctx, t0, 6*lease), req, []byte("late-step"), op)
		if err != nil {
			t.Fatalf("after both: %v, %v", res, err)
		}
		if want := "email_" + dedupe.StepKey("steps", "late-step", "email")[:12]; string(res.Response) != want {
			t.Fatalf("response %q, want %q", res.Response, want)
		}
		wantLedgerOnce(t, ctx, db, "late-step")
		svc.effectsOnce(t, 2)
	})

	// Three instances run ResumeEvery: one is elected and runs the
	// rounds, the others skip theirs.
	t.Run("ResumeEveryElects", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		op := paymentOp(db, newOutsideService(t), &stepFaults{}, lease)
		var ran, skipped atomic.Int64
		cctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 3 {
			d := sqlonce.Observe(db.Driver(), sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) {
				if e.Operation != "ResumeEvery" {
					return
				}
				switch e.Status {
				case sqlonce.EventFirstRun:
					ran.Add(1)
				case sqlonce.EventAlreadyDone:
					skipped.Add(1)
				}
			}))
			s, err := dedupe.New(d)
			must(t, err)
			wg.Add(1)
			go func() { defer wg.Done(); _ = s.ResumeEvery(cctx, 100*time.Millisecond, 3, op) }()
		}
		deadline := time.Now().Add(time.Minute)
		for (ran.Load() < 3 || skipped.Load() < 3) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		wg.Wait()
		if ran.Load() < 3 || skipped.Load() < 3 {
			t.Fatalf("%d rounds run, %d skipped", ran.Load(), skipped.Load())
		}
	})

	t.Run("ResumeEvery", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		var rounds, runErrs, replays, resumed atomic.Int64
		obsDriver := sqlonce.Observe(db.Driver(), sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) {
			switch {
			case e.Operation == "ResumeEvery" && e.Status == sqlonce.EventFirstRun:
				rounds.Add(e.Rows)
			case e.Operation == "ResumeStuck" && e.Status == sqlonce.EventTakeover:
				resumed.Add(1)
			case e.Operation == "RunSteps" && e.Status == sqlonce.EventError:
				runErrs.Add(1)
			case e.Operation == "RunSteps" && e.Status == sqlonce.EventReplayed:
				replays.Add(1)
			}
		}))
		s, err := dedupe.New(obsDriver)
		must(t, err)
		svc := newOutsideService(t)
		faults := &stepFaults{}
		op := paymentOp(db, svc, faults, 200*time.Millisecond)
		runCtx, cancel := context.WithCancel(ctx)
		faults.fault, faults.cancel = &stepFault{step: "charge", inside: true, mode: "cancel"}, cancel
		req := dedupe.Request{Scope: "steps", Key: "every"}
		_, err = s.RunSteps(runCtx, req, []byte("every"), op)
		wantErr(t, "stopped run", err, context.Canceled)
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.ResumeEvery(cctx, 50*time.Millisecond, 3, op) }()
		deadline := time.Now().Add(time.Minute)
		for rounds.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		<-done
		res, err := s.RunSteps(ctx, req, []byte("every"), op)
		if err != nil || !res.AlreadyDone() {
			t.Fatalf("after the resumer: %v, %v", res, err)
		}
		wantLedgerOnce(t, ctx, db, "every")
		svc.effectsOnce(t, 2)
		if runErrs.Load() != 1 || replays.Load() != 1 || resumed.Load() != 1 {
			t.Fatalf("events: RunSteps %d errors, %d replays; ResumeStuck %d resumed; want 1 each", runErrs.Load(), replays.Load(), resumed.Load())
		}
	})
}
