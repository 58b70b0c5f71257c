package dedupe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// DefaultStepLease is how long an Operation's run holds its key between
// recovery points when the Operation sets no Lease.
const DefaultStepLease = time.Minute

// ErrOperationFailed is returned by RunSteps for a key whose operation
// ResumeStuck gave up after its attempts, and for every repeat of that
// key until it expires, is forgotten (Store.ForgetSteps) or re-driven
// (Store.Redrive).
var ErrOperationFailed = errors.New("sqlonce/dedupe: the operation was given up")

// Operation is an operation made of named steps, run under one
// idempotency key by Store.RunSteps and finished, when its caller went
// away, by Store.ResumeStuck. Each step records a recovery point: a run
// that stopped (a crash, a cancelled context, a lost connection, an
// error) is resumed after the last step recorded, by a retry with the same
// key or by the resumer, and the steps before it do not run again.
type Operation[TTx any] struct {
	// Name identifies the operation: it is stored with the recovery
	// point, and the resumer finds the steps of a stuck key by it.
	// Required; at most 255 bytes.
	Name string
	// Steps run in order; at least one. Their names are unique within the
	// operation. The last step's result is the operation's response.
	Steps []Step[TTx]
	// Lease is how long a run holds the key past each recovery point
	// (DefaultStepLease for 0): a run that stops leaves the key to a retry
	// or the resumer once it lapses (at once when a step returned an
	// error: the run releases it; after Lease when a step panicked or
	// the run's context ended). Choose it longer than the slowest step.
	Lease time.Duration
}

// Step is one step of an Operation: a database step (InTx) or an outside
// step (Outside), exactly one of the two.
type Step[TTx any] struct {
	// Name names the step; required, unique within the operation, at most
	// 255 bytes. It goes into StepState.Key.
	Name string
	// InTx is a database step: it runs in a transaction of the Store's
	// own that also records its result as the recovery point, fenced by
	// the run's lease, so that its writes commit exactly once. It does its
	// work through tx only and never commits or rolls back tx; returning
	// an error rolls it back. It may run more than once (a deadlock, a
	// takeover), but only one run commits.
	InTx func(ctx context.Context, tx TTx, st StepState) ([]byte, error)
	// Outside is an outside step: it calls a system the database cannot
	// roll back (a payment provider, a mail server), between
	// transactions. It runs at least once: when a run stops after the call
	// and before its result is recorded, the next run calls again. Pass
	// st.Key to that system as its idempotency key, so that the repeat
	// changes nothing there.
	Outside func(ctx context.Context, st StepState) ([]byte, error)
	// Retry is the outside step's retry policy within a run (RunSteps', or
	// the resumer's): the zero Retry calls it once, and an error stops
	// the run. Only for an Outside step: a database step's transaction is
	// retried by the Store itself on the errors sqlonce.IsRetryable
	// accepts, and a Retry on it is sqlonce.ErrInvalidArgument.
	Retry Retry
}

// Retry is an outside step's retry policy: a run calls the step up to
// Attempts times in place, while it returns an error that Retryable
// accepts, waiting between calls with exponential backoff and equal
// jitter: before call n+1 it waits a random time between d/2 and d, where
// d is Initial doubled n-1 times, capped at Max. The waits never shrink
// from one call to the next, and never exceed Max.
//
// Before each wait the run extends its lease over the wait and a whole
// Operation.Lease after it (a lease lost meanwhile stops the run with
// sqlonce.ErrLeaseLost). A ctx that ends during a wait stops the run
// with an error matching ctx's, without another call, and leaves the
// lease to lapse, as a ctx that ends in a step does. A panic is never
// retried, nor an error returned once ctx ended. When the attempts run
// out, or Retryable refuses the error, the run stops with the step's
// error as it does without a Retry (the lease released); the next run (a
// retry of RunSteps, or the resumer) starts the count again at 1.
// StepState.Try numbers the calls within a run; each retry adds one to
// the run's Event.Attempts, the step's error its RetryCause. The resumer
// waits as RunSteps does, key after key: keep the waits of a round
// (Attempts times Max, at most) well under ResumeEvery's interval.
//
// RunSteps, ResumeStuck and ResumeEvery refuse a bad Retry with
// sqlonce.ErrInvalidArgument naming the field: Attempts negative, or over
// 1 with Initial not positive or Max under Initial.
type Retry struct {
	// Attempts bounds the calls of the step per run, the first included:
	// 0 and 1 call it once.
	Attempts int
	// Initial is the base of the first wait.
	Initial time.Duration
	// Max caps every wait.
	Max time.Duration
	// Retryable reports whether the step's error is worth another call;
	// nil retries every error.
	Retryable func(error) bool
}

func (r Retry) check() error {
	switch {
	case r.Attempts < 0:
		return fmt.Errorf("Retry.Attempts %d is negative", r.Attempts)
	case r.Initial < 0:
		return fmt.Errorf("Retry.Initial %v is negative", r.Initial)
	case r.Max < 0:
		return fmt.Errorf("Retry.Max %v is negative", r.Max)
	case r.Attempts > 1 && r.Initial == 0:
		return fmt.Errorf("Retry.Initial is 0 with Retry.Attempts %d", r.Attempts)
	case r.Attempts > 1 && r.Max < r.Initial:
		return fmt.Errorf("Retry.Max %v is under Retry.Initial %v", r.Max, r.Initial)
	}
	return nil
}

func (r Retry) set() bool {
	return r.Attempts != 0 || r.Initial != 0 || r.Max != 0 || r.Retryable != nil
}

// retries reports whether a call n (from 1) that failed with err is
// called again.
func (r Retry) retries(n int, err error) bool {
	return n < r.Attempts && (r.Retryable == nil || r.Retryable(err))
}

// wait is the wait after the failed call n (from 1): equal jitter, d/2 +
// rand[0, d/2], d = min(Max, Initial<<(n-1)).
func (r Retry) wait(n int) time.Duration {
	d := r.Initial
	for i := 1; i < n && d < r.Max; i++ {
		if d > r.Max/2 {
			d = r.Max // and no overflow
			break
		}
		d *= 2
	}
	d = min(d, r.Max)
	return d/2 + rand.N(d/2+1)
}

// StepState is what a step gets: the operation's input and the results of
// the steps before it.
type StepState struct {
	// Input is the input given to RunSteps, as it was stored with the key.
	Input []byte
	// Key is derived from the request's scope and key and the step's
	// name: the same in every run of the step, different for every step
	// and every key (64 hexadecimal digits). Give it to the outside
	// system as its idempotency key.
	Key string
	// Attempt counts the runs of the operation that held its key, this
	// one included: 1 for the first.
	Attempt int
	// Try counts the calls of this step in this run, this one included:
	// 1 for the first, more when Step.Retry called it again.
	Try int

	names   []string
	results [][]byte
}

// Result returns the result of the earlier step named step, and false
// when no such step has run. The slice is the recorded result, which the
// next recovery point stores again: read it, do not modify it.
func (st StepState) Result(step string) ([]byte, bool) {
	for i, n := range st.names {
		if n == step {
			return st.results[i], true
		}
	}
	return nil, false
}

// StepKey is the key a step named step of the operation under scope and
// key gets in StepState.Key: a hex SHA-256 of the three. It also makes the
// idempotency key a lease holder gives an outside system
// (StepKey(l.Scope, l.Key, "charge")): the same for every claimer of the
// key, and apart from other scopes' keys.
func StepKey(scope, key, step string) string {
	h := sha256.New()
	for _, s := range []string{scope, key, step} {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(s)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (op *Operation[TTx]) check() error {
	if op == nil {
		return fmt.Errorf("%w: nil operation", sqlonce.ErrInvalidArgument)
	}
	if err := keys.Check("operation name", op.Name); err != nil {
		// A bad operation is an invalid argument, as the doc of
		// ResumeStuck and ResumeEvery says; ErrInvalidKey still
		// matches.
		return fmt.Errorf("%w: %w", sqlonce.ErrInvalidArgument, err)
	}
	if len(op.Steps) == 0 {
		return fmt.Errorf("%w: operation %q has no steps", sqlonce.ErrInvalidArgument, op.Name)
	}
	if op.Lease < 0 || (op.Lease > 0 && op.Lease < time.Microsecond) {
		return fmt.Errorf("%w: operation %q: lease %v", sqlonce.ErrInvalidArgument, op.Name, op.Lease)
	}
	seen := map[string]bool{}
	for i, st := range op.Steps {
		if err := keys.Check("step name", st.Name); err != nil {
			return fmt.Errorf("%w: operation %q, step %d: %w", sqlonce.ErrInvalidArgument, op.Name, i, err)
		}
		if seen[st.Name] {
			return fmt.Errorf("%w: operation %q has two steps named %q", sqlonce.ErrInvalidArgument, op.Name, st.Name)
		}
		seen[st.Name] = true
		if (st.InTx == nil) == (st.Outside == nil) {
			return fmt.Errorf("%w: operation %q, step %q: set exactly one of InTx and Outside", sqlonce.ErrInvalidArgument, op.Name, st.Name)
		}
		if st.InTx != nil && st.Retry.set() {
			return fmt.Errorf("%w: operation %q, step %q: Retry is for Outside steps (a database step's transaction is retried on sqlonce.IsRetryable errors)", sqlonce.ErrInvalidArgument, op.Name, st.Name)
		}
		if err := st.Retry.check(); err != nil {
			return fmt.Errorf("%w: operation %q, step %q: %w", sqlonce.ErrInvalidArgument, op.Name, st.Name, err)
		}
	}
	return nil
}

func (op *Operation[TTx]) lease() time.Duration {
	if op.Lease == 0 {
		return DefaultStepLease
	}
	return op.Lease
}

// RunSteps runs op under req's key, with input, once: each step exactly
// once for a database step, at least once with the same StepState.Key for
// an outside step, and answers with the last step's result, recorded with
// the key and replayed, byte for byte, to every repeat (AlreadyDone)
// until the key expires, and runs on the driver's database handle.
//
// The first call claims the key with a lease (op.Lease) and stores input
// and the fingerprint with it, then runs the steps, recording after each
// one its result as the key's recovery point and extending the lease.
// When the first step is a database step, the claim commits in that
// step's transaction, one commit for both: a duplicate meanwhile waits
// on the key's row (WithNoWait and WithLockWait do not bound it), then
// finds it running or done; past the database's own lock wait
// (MariaDB's innodb_lock_wait_timeout, 50 s by default: error 1205; a
// lock_timeout set on PostgreSQL) it gets an error matching
// sqlonce.ErrInProgress, and sqlonce.IsRetryable, wrapping the
// database's (a Store built WithAwaitResult waits on instead). A
// process that dies inside that transaction leaves no key: the next
// call starts anew, a first attempt. Should the transaction fail (the
// step's error, a panic, ctx's end, a database error), the key is then
// claimed alone, so that it stands as a run stopped in its first step
// stands (released after the step's error). Through Vitess the key is
// claimed alone before the step's transaction (see docs/drivers.md). A
// call that finds the key's lease lapsed, its run stopped between or
// inside steps, takes it over and resumes after the last recovery point,
// with the input stored at the first call (FirstRun: this call finished
// the work). An outside step that returns an error is called again in
// place as its Step.Retry says; a step's error that is not retried
// stops the run: RunSteps
// releases the lease, so that the next call resumes at that step at once,
// and returns the error. A panic in a step goes on to the caller
// unchanged (the step's transaction rolled back), and a ctx that ends
// stops the run where it is (ctx's error): both leave the lease to lapse
// after op.Lease, retries getting sqlonce.ErrInProgress meanwhile. It is
// not released then, since an outside step cut short may still be at
// work in the outside system.
//
// input is stored with the key, in its recovery point, with op.Name and
// the names and results of the steps done (all but the last, whose
// result becomes the response): all of it, and a few bytes of lengths,
// must fit the Store's WithMaxResponseSize (DefaultMaxResponseSize by
// default), as must the response with op.Name. A larger input is
// sqlonce.ErrResponseTooLarge before any SQL runs; a step whose result
// would not fit stops the run with that error (a database step's
// transaction rolled back), and the lease is left to lapse.
//
// Other answers: sqlonce.ErrKeyReuse for a key recorded, or in progress,
// with another fingerprint or by another operation (an op.Name of its
// own: done, given up, running or stopped, the key is never answered
// from, nor resumed by, another operation; a key done or given up by
// a pre-release build did not record its operation, and answers any);
// sqlonce.ErrInProgress while another run of op holds the lease (a Store
// built WithAwaitResult waits for the answer instead); sqlonce.ErrLeaseLost when this run's
// lease was taken over (it stops at once: the other run goes on);
// ErrOperationFailed once ResumeStuck gave the operation up;
// sqlonce.ErrInvalidKey, sqlonce.ErrInvalidArgument for bad input, and
// sqlonce.ErrResponseTooLarge for a recovery point or a response over the
// Store's limit (the operation's name, recorded with the response, counts).
//
// An unfinished operation's key lives for the Request's TTL (the Store's
// by default) from the first call, and at least as long as each lease;
// once finished, by this call, a retry or the resumer, or given up, the
// key lives for that same TTL again from that moment. An expired key
// counts as absent, done or not, so an operation still stopped when its
// key expires starts anew at its first step. Keep the TTL well above the
// time an operation may stay stopped (ResumeEvery's interval times its
// attempts).
//
// The operation's keys are apart from the Store's other keys (Do, Run,
// Claim): the same scope and key may name both. Each call is reported to
// the driver's Observer as an Event with Operation "RunSteps"
// (EventTakeover when it resumed a stopped run).
func (s *Store[TTx]) RunSteps(ctx context.Context, req Request, input []byte, op *Operation[TTx]) (res sqlonce.Result, err error) {
	o := obs.Start(s.observer, "dedupe", "RunSteps", req.Scope, req.Key)
	defer func() { err = o.End(ctx, res, err) }()
	if err := op.check(); err != nil {
		return sqlonce.Result{}, err
	}
	ttl, err := s.check(req)
	if err != nil {
		return sqlonce.Result{}, err
	}
	k := s.stepsKey(req.Scope, req.Key)
	fresh := recovery{op: op.Name, attempts: 1, ttl: ttl, input: input}
	if rec := fresh.encode(); len(rec) > s.maxResponse {
		return sqlonce.Result{}, fmt.Errorf("%w: input of %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(input), req.Key, s.maxResponse)
	}
	var w awaiter
	for tries := 0; tries < 3 || s.await; tries++ {
		var row driver.StepRow
		var found bool
		err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &o, func(ctx context.Context, tx TTx) (err error) {
			row, found, err = s.engine.StepGet(ctx, tx, k, testclock.Now(ctx))
			return err
		})
		if err != nil && ctx.Err() == nil && driver.Classify(err).Has(driver.LockNotAvailable) {
			// A locking read (MySQL's) gave up waiting on the key's row,
			// which a step's transaction holds: a first database step's
			// holds it throughout, its claim with it.
			err = fmt.Errorf("%w: key %q in scope %q is held by a running step's transaction: %w", sqlonce.ErrInProgress, req.Key, req.Scope, err)
			if !s.await {
				return sqlonce.Result{}, err
			}
			if err := w.wait(ctx, err); err != nil {
				return sqlonce.Result{}, err
			}
			continue
		}
		if err != nil {
			err = fmt.Errorf("sqlonce/dedupe: run steps of key %q: %w", req.Key, err)
			if ctx.Err() != nil {
				err = w.ended(err)
			}
			return sqlonce.Result{}, err
		}
		if !found || row.Expired {
			// A new key, or an expired one: start from the first step.
			// Never over a lapsed lease, which holds a recovery point.
			if op.Steps[0].InTx != nil {
				// The claim commits with the first step.
				res, ok, err := s.startWithStep(ctx, k, row, found, req, ttl, fresh, op, &o)
				if err == nil && !ok {
					continue // someone else started it: read it again
				}
				if !ok && s.await && errors.Is(err, sqlonce.ErrInProgress) {
					// The key's row stayed locked past the lock wait:
					// another call's first step runs. Read it again
					// after a pause.
					if err := w.wait(ctx, err); err != nil {
						return sqlonce.Result{}, err
					}
					continue
				}
				if !ok && err != nil && !errors.Is(err, errStartApart) && ctx.Err() != nil {
					// ctx ended while the claim waited, maybe after
					// an ErrInProgress awaited.
					return sqlonce.Result{}, w.ended(err)
				}
				if !errors.Is(err, errStartApart) {
					return res, err
				}
				// The driver starts keys in autocommit only: below.
			}
			token, ok, err := s.stepStart(ctx, k, row, found, req, ttl, op.lease(), fresh, &o)
			if err != nil {
				return sqlonce.Result{}, err
			}
			if !ok {
				continue // someone else started it: read it again
			}
			o.Decided()
			return s.runStepsFrom(ctx, k, token, fresh, op, ttl, &o)
		}
		if !bytes.Equal(row.Fingerprint, req.Fingerprint) {
			return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q", sqlonce.ErrKeyReuse, req.Key, req.Scope)
		}
		if row.State == driver.StateDone {
			return replaySteps(req, op.Name, row.Response)
		}
		if row.Leased {
			// Another operation's run is refused as another operation's
			// recorded end is: its key is not this operation's.
			if rec, err := decodeRecovery(row.Response); err == nil && rec.op != op.Name {
				return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q runs operation %q, not %q", sqlonce.ErrKeyReuse, req.Key, req.Scope, rec.op, op.Name)
			}
			err := fmt.Errorf("%w: key %q in scope %q is running its steps", sqlonce.ErrInProgress, req.Key, req.Scope)
			if !s.await {
				return sqlonce.Result{}, err
			}
			// WithAwaitResult: read the key again after a pause.
			if err := w.wait(ctx, err); err != nil {
				return sqlonce.Result{}, err
			}
			continue
		}
		rec, err := recoveryOf(k, row, fresh)
		if err != nil {
			return sqlonce.Result{}, err
		}
		if rec.op != op.Name {
			return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q runs operation %q, not %q", sqlonce.ErrKeyReuse, req.Key, req.Scope, rec.op, op.Name)
		}
		token, ok, err := s.stepResume(ctx, k, row, rec, op.lease(), &o)
		if err != nil {
			return sqlonce.Result{}, err
		}
		if !ok {
			continue // someone else moved the key: read it again
		}
		o.Decided()
		o.Takeover()
		return s.runStepsFrom(ctx, k, token, rec, op, ttl, &o)
	}
	return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q changed hands while being read", sqlonce.ErrInProgress, req.Key, req.Scope)
}

// replaySteps answers a call of operation op from its key's recorded
// end.
func replaySteps(req Request, op string, response []byte) (sqlonce.Result, error) {
	e, err := decodeFinal(response)
	if err != nil {
		return sqlonce.Result{}, fmt.Errorf("sqlonce/dedupe: key %q: %w", req.Key, err)
	}
	resp, err := e.answer(op, req.Scope, req.Key)
	if err != nil {
		return sqlonce.Result{}, err
	}
	return sqlonce.Result{Outcome: sqlonce.AlreadyDone, Response: resp}, nil
}

// stepStart records k, new (found false) or in place of its expired row,
// leased, with rec as its recovery point, and returns its token. ok is
// false when the key turned out taken since it was read.
func (s *Store[TTx]) stepStart(ctx context.Context, k driver.Key, row driver.StepRow, found bool, req Request, ttl, lease time.Duration, rec recovery, o *obs.Op) (token int64, ok bool, err error) {
	ttl = max(ttl, lease) // keeps locked_until <= expires_at
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) (err error) {
		now := testclock.Now(ctx)
		if !found {
			token, ok, err = s.engine.StepStart(ctx, tx, k, req.Fingerprint, rec.encode(), lease, ttl, now)
			return err
		}
		token = row.Token + 1
		ok, err = s.engine.StepRestart(ctx, tx, k, row.Token, row.Response, req.Fingerprint, rec.encode(), lease, ttl, now)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("sqlonce/dedupe: start steps of key %q: %w", k.Key, err)
	}
	return token, ok, nil
}

// recoveryOf decodes row's recovery point, one attempt more; fresh when
// the row has none.
func recoveryOf(k driver.Key, row driver.StepRow, fresh recovery) (recovery, error) {
	if row.Response == nil {
		return fresh, nil
	}
	rec, err := decodeRecovery(row.Response)
	if err != nil {
		return rec, fmt.Errorf("sqlonce/dedupe: key %q: %w", k.Key, err)
	}
	rec.attempts++
	return rec, nil
}

// stepResume takes over row's lapsed lease for lease, storing rec as the
// recovery point, and returns the new token. ok is false when the row
// changed since it was read.
func (s *Store[TTx]) stepResume(ctx context.Context, k driver.Key, row driver.StepRow, rec recovery, lease time.Duration, o *obs.Op) (token int64, ok bool, err error) {
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) (err error) {
		ok, err = s.engine.StepResume(ctx, tx, k, row.Token, row.Response, rec.encode(), lease, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("sqlonce/dedupe: resume steps of key %q: %w", k.Key, err)
	}
	return row.Token + 1, ok, nil
}

// runStepsFrom runs op's steps after those rec holds, holding k's lease
// with token, and records the last one's result as the response.
func (s *Store[TTx]) runStepsFrom(ctx context.Context, k driver.Key, token int64, rec recovery, op *Operation[TTx], ttl time.Duration, o *obs.Op) (sqlonce.Result, error) {
	if len(rec.names) > len(op.Steps) {
		return sqlonce.Result{}, fmt.Errorf("%w: key %q recorded %d steps, operation %q has %d", sqlonce.ErrInvalidArgument, k.Key, len(rec.names), op.Name, len(op.Steps))
	}
	for i, n := range rec.names {
		if op.Steps[i].Name != n {
			return sqlonce.Result{}, fmt.Errorf("%w: key %q recorded step %q where operation %q has %q", sqlonce.ErrInvalidArgument, k.Key, n, op.Name, op.Steps[i].Name)
		}
	}
	lease := op.lease()
	var resp []byte
	if len(rec.results) > 0 {
		resp = rec.results[len(rec.results)-1]
	}
	if len(rec.names) == len(op.Steps) {
		// Every step is recorded, the last one too, but not as the
		// response: the operation lost its last steps since this key's
		// run stopped. Record the response now, so that a repeat replays
		// it instead of finding the key leased.
		return s.finishSteps(ctx, k, token, resp, ttl, op, o)
	}
	o.WorkStart()
	defer o.WorkEnd()
	for i := len(rec.names); i < len(op.Steps); i++ {
		step := op.Steps[i]
		st := StepState{Input: rec.input, Key: StepKey(k.Scope, k.Key, step.Name), Attempt: rec.attempts, Try: 1, names: rec.names, results: rec.results}
		var pending recovery
		record := func(ctx context.Context, tx TTx, result []byte) (err error) {
			pending, err = s.recordStep(ctx, tx, k, token, rec, op, i, result, ttl)
			return err
		}
		var err error
		var stepErr bool
		if step.InTx != nil {
			err = owntx.RunObserved(ctx, s.engine, o, func(ctx context.Context, tx TTx) error {
				result, err := step.InTx(ctx, tx, st)
				if err != nil {
					stepErr = true
					return err
				}
				resp = result
				return record(ctx, tx, result)
			})
		} else {
			var result []byte
			for {
				if result, err = step.Outside(ctx, st); err == nil || ctx.Err() != nil || !step.Retry.retries(st.Try, err) {
					break
				}
				if werr := s.retryWait(ctx, k, token, step.Retry.wait(st.Try), lease, o); werr != nil {
					return sqlonce.Result{}, fmt.Errorf("sqlonce/dedupe: key %q, step %q after its call %d failed (%v): %w", k.Key, step.Name, st.Try, err, werr)
				}
				o.Retried(err)
				st.Try++
			}
			if err != nil {
				stepErr = true
			} else {
				resp = result
				err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) error {
					return record(ctx, tx, result)
				})
			}
		}
		if err == nil {
			rec = pending
		}
		if err != nil {
			if stepErr && ctx.Err() == nil {
				// Let the next call resume at this step at once, the
				// step's error kept in the recovery point (when it fits)
				// for InspectSteps and the resumer's giving up.
				stopped := rec.failedAt(step.Name, err)
				failed := stopped.encode()
				_ = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) error {
					now := testclock.Now(ctx)
					if len(failed) <= s.maxResponse {
						// A lease lost meanwhile saves nothing, and
						// Release then finds nothing to release.
						if _, err := s.engine.StepSave(ctx, tx, k, token, failed, 0, now); err != nil {
							return err
						}
					}
					_, err := s.engine.Release(ctx, tx, k, token, now)
					return err
				})
			}
			return sqlonce.Result{}, err
		}
	}
	if resp == nil {
		resp = []byte{}
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
}

// recordStep saves result, that of op's step i, after rec, with k's lease
// held with token, and returns the recovery point it saved; for the last
// step it records the response and ends the lease.
func (s *Store[TTx]) recordStep(ctx context.Context, tx TTx, k driver.Key, token int64, rec recovery, op *Operation[TTx], i int, result []byte, ttl time.Duration) (recovery, error) {
	step := op.Steps[i]
	next := rec
	next.names = append(rec.names[:len(rec.names):len(rec.names)], step.Name)
	next.results = append(rec.results[:len(rec.results):len(rec.results)], result)
	next.errStep, next.errText = "", ""
	var ok bool
	var err error
	if i == len(op.Steps)-1 {
		f := final(op.Name, false, result)
		if len(f) > s.maxResponse {
			return next, fmt.Errorf("%w: response of %d bytes for key %q, the operation's name included, limit %d", sqlonce.ErrResponseTooLarge, len(f), k.Key, s.maxResponse)
		}
		ok, err = s.engine.Complete(ctx, tx, k, token, f, ttl, testclock.Now(ctx))
	} else {
		b := next.encode()
		if len(b) > s.maxResponse {
			return next, fmt.Errorf("%w: recovery point of %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(b), k.Key, s.maxResponse)
		}
		ok, err = s.engine.StepSave(ctx, tx, k, token, b, op.lease(), testclock.Now(ctx))
	}
	if err != nil {
		return next, err
	}
	if !ok {
		return next, fmt.Errorf("%w: steps of key %q in scope %q, token %d, at step %q", sqlonce.ErrLeaseLost, k.Key, k.Scope, token, step.Name)
	}
	return next, nil
}

// errStartApart: the driver starts a key in autocommit only (through
// vtgate, see mysqldriver), so the claim commits before the first step.
var errStartApart = errors.New("sqlonce/dedupe: the key is started apart")

// startWithStep starts k as stepStart does, for op whose first step is
// a database step, and runs that step and records its recovery point in
// the same transaction: one commit for the claim and the step. A
// duplicate meanwhile waits on the key's row and then finds it in
// progress, or done. ok is false, and nothing ran, when the key turned
// out taken. When the step's transaction fails (the step's error, a
// panic, ctx's end, a database error) it rolled the claim back too: the
// key is then started as stepStart would have left it before the step,
// and released on the step's error, so that a retry or the resumer finds
// the run stopped at its first step, as when the claim commits alone.
func (s *Store[TTx]) startWithStep(ctx context.Context, k driver.Key, row driver.StepRow, found bool, req Request, ttl time.Duration, rec recovery, op *Operation[TTx], o *obs.Op) (res sqlonce.Result, ok bool, err error) {
	lease := op.lease()
	keyTTL := max(ttl, lease) // keeps locked_until <= expires_at
	step := op.Steps[0]
	st := StepState{Input: rec.input, Key: StepKey(k.Scope, k.Key, step.Name), Attempt: rec.attempts, Try: 1}
	var token int64
	var claimed, stepErr bool
	var resp []byte
	var next recovery
	// stopped leaves the key as a run stopped in its first step leaves
	// it: claimed; released after the step's error (stepErr), kept in
	// the recovery point when it fits.
	stopped := func(stepErr error) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		start := rec
		if stepErr != nil {
			if failed := rec.failedAt(step.Name, stepErr); len(failed.encode()) <= s.maxResponse {
				start = failed
			}
		}
		tok, ok, err := s.stepStart(sctx, k, row, found, req, ttl, lease, start, o)
		if err != nil || !ok || stepErr == nil {
			return
		}
		_ = owntx.RunStatements(sctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) error {
			_, err := s.engine.Release(ctx, tx, k, tok, testclock.Now(ctx))
			return err
		})
	}
	defer func() {
		if p := recover(); p != nil {
			if claimed {
				stopped(nil)
			}
			panic(p)
		}
	}()
	err = owntx.RunObserved(ctx, s.engine, o, func(ctx context.Context, tx TTx) (err error) {
		claimed, stepErr = false, false
		now := testclock.Now(ctx)
		if !found {
			token, claimed, err = s.engine.StepStart(ctx, tx, k, req.Fingerprint, rec.encode(), lease, keyTTL, now)
		} else {
			token = row.Token + 1
			claimed, err = s.engine.StepRestart(ctx, tx, k, row.Token, row.Response, req.Fingerprint, rec.encode(), lease, keyTTL, now)
		}
		if err != nil || !claimed {
			return err
		}
		o.WorkStart()
		result, err := step.InTx(ctx, tx, st)
		o.WorkEnd()
		if err != nil {
			stepErr = true
			return err
		}
		resp = result
		next, err = s.recordStep(ctx, tx, k, token, rec, op, 0, result, ttl)
		return err
	})
	if err != nil {
		if !claimed && errors.Is(err, driver.ErrNoRun) {
			return sqlonce.Result{}, false, errStartApart
		}
		if !claimed && driver.Classify(err).Has(driver.LockNotAvailable) {
			// Another call's first step holds the key's row longer than
			// the lock wait (MariaDB's innodb_lock_wait_timeout, 1205;
			// a lock_timeout set on PostgreSQL): the key is running.
			return sqlonce.Result{}, false, fmt.Errorf("%w: key %q in scope %q is running its first step in another transaction: %w", sqlonce.ErrInProgress, req.Key, req.Scope, err)
		}
		if !claimed && ctx.Err() != nil {
			// ctx ended before the claim was made, most often while it
			// waited on the key's row, which another call's first step
			// holds. Nothing of this call committed (its step never ran,
			// its transaction never reached COMMIT), whatever the driver
			// made of the cut connection.
			return sqlonce.Result{}, false, fmt.Errorf("%w: key %q in scope %q: the claim did not finish before ctx ended (another call's first step may hold the key's row): %w", sqlonce.ErrInProgress, req.Key, req.Scope, ctx.Err())
		}
		if !claimed {
			return sqlonce.Result{}, false, fmt.Errorf("sqlonce/dedupe: start steps of key %q: %w", k.Key, err)
		}
		var failed error
		if stepErr && ctx.Err() == nil {
			failed = err
		}
		stopped(failed)
		return sqlonce.Result{}, true, err
	}
	if !claimed {
		return sqlonce.Result{}, false, nil
	}
	o.Decided()
	if len(op.Steps) > 1 {
		res, err = s.runStepsFrom(ctx, k, token, next, op, ttl, o)
		return res, true, err
	}
	if resp == nil {
		resp = []byte{}
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, true, nil
}

// retryWait extends the lease held on k with token over wait and a whole
// lease after it, then waits; ctx's error when it ends first,
// sqlonce.ErrLeaseLost when the lease was lost.
func (s *Store[TTx]) retryWait(ctx context.Context, k driver.Key, token int64, wait, lease time.Duration, o *obs.Op) error {
	var ok bool
	err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) (err error) {
		ok, err = s.engine.Extend(ctx, tx, k, token, wait+lease, testclock.Now(ctx))
		return err
	})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// ctx ended during the extension, which some drivers report
			// as their own error (lib/pq: driver.ErrBadConn).
			return fmt.Errorf("%w: %w", cerr, err)
		}
		return err
	}
	if !ok {
		return fmt.Errorf("%w: steps of key %q in scope %q, token %d", sqlonce.ErrLeaseLost, k.Key, k.Scope, token)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// finishSteps records resp, the result of op's last step, recorded
// earlier as a recovery point, as k's response, with the lease held with
// token.
func (s *Store[TTx]) finishSteps(ctx context.Context, k driver.Key, token int64, resp []byte, ttl time.Duration, op *Operation[TTx], o *obs.Op) (sqlonce.Result, error) {
	f := final(op.Name, false, resp)
	if len(f) > s.maxResponse {
		return sqlonce.Result{}, fmt.Errorf("%w: response of %d bytes for key %q, the operation's name included, limit %d", sqlonce.ErrResponseTooLarge, len(f), k.Key, s.maxResponse)
	}
	var ok bool
	err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, o, func(ctx context.Context, tx TTx) (err error) {
		ok, err = s.engine.Complete(ctx, tx, k, token, f, ttl, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return sqlonce.Result{}, err
	}
	if !ok {
		return sqlonce.Result{}, fmt.Errorf("%w: steps of key %q in scope %q, token %d, at the end of operation %q", sqlonce.ErrLeaseLost, k.Key, k.Scope, token, op.Name)
	}
	if resp == nil {
		resp = []byte{}
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
}
