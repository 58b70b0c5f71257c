package dedupe

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// resumerKey is the row of sqlonce_keys whose lease elects the instance
// that runs ResumeEvery's rounds (beside the purger's, never purged):
// one per namespace of operations, so that the resumers of dedupe's
// operations and of httpidem's are elected apart. Its scope keeps the
// name it had when ResumeEvery was CompleteEvery, so that instances of
// either version elect one among them.
func (s *Store[TTx]) resumerKey() driver.Key {
	k := driver.Key{Namespace: driver.NamespaceElection, Scope: "completer", Key: "sqlonce_keys"}
	if s.stepsNS != driver.NamespaceSteps {
		k.Key = fmt.Sprintf("sqlonce_keys/%d", s.stepsNS)
	}
	return k
}

// resumeBatch bounds the keys one ResumeStuck looks at.
const resumeBatch = 100

// ResumeStuck finishes operations of several steps whose run stopped:
// keys whose lease lapsed, their caller gone (a crash, a cancelled
// context) or its step failed, and that no retry took over since. It
// looks at up to 100 of them, longest stuck first, and resumes each as
// RunSteps would, with the steps of the operation in ops whose Name it
// recorded, the input stored at its first call, and the TTL of its first
// call (its Request's, or the Store's), counted from when it finishes the
// operation, for the response. An operation already run maxAttempts
// times (the first run counts) is given up instead: its key is recorded
// failed, for that TTL from then, with the step it stopped at, the last
// step error's text and the attempts (InspectSteps tells them), and
// RunSteps answers ErrOperationFailed for it until it expires (or
// Redrive or ForgetSteps). A step's error that stops a run is kept with
// the recovery point for this, its text cut to 1024 bytes.
//
// It reports how many operations it finished and how many it gave up.
// A key it cannot finish (a step's error, an operation not in ops, a
// lease taken over meanwhile) stays for the next call; the errors are
// joined in err, and the other keys go on. A step that panics stops its
// key's run as it stops RunSteps' (its transaction rolled back, the
// lease left to lapse), but ResumeStuck recovers the panic: it is that
// key's error, with the panic's value (errors.Is matches a value that is
// an error) and stack, and the attempt counts toward maxAttempts. When
// ctx ends, the key being run stops where it is, its lease left to lapse
// as a cancelled RunSteps leaves it, and ResumeStuck returns.
//
// maxAttempts under 1, a bad operation and two operations of one name
// are sqlonce.ErrInvalidArgument. Each call of it resumes a key only by
// taking its lapsed lease, so that calls on several instances at once
// never run one step twice; ResumeEvery elects one instance anyway.
func (s *Store[TTx]) ResumeStuck(ctx context.Context, maxAttempts int, ops ...*Operation[TTx]) (finished, failed int, err error) {
	if maxAttempts < 1 {
		return 0, 0, fmt.Errorf("%w: max attempts %d is under 1", sqlonce.ErrInvalidArgument, maxAttempts)
	}
	byName, err := operations(ops)
	if err != nil {
		return 0, 0, err
	}
	var stuck []driver.Key
	err = owntx.Run(ctx, s.engine, func(ctx context.Context, tx TTx) (err error) {
		stuck, err = s.engine.StepStuck(ctx, tx, s.stepsNS, resumeBatch, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sqlonce/dedupe: find stuck steps: %w", err)
	}
	var errs []error
	for _, k := range stuck {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		done, gaveUp, err := s.resumeOne(ctx, k, maxAttempts, byName)
		if done {
			finished++
		}
		if gaveUp {
			failed++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return finished, failed, errors.Join(errs...)
}

// operations checks ops and indexes them by name: two operations of one
// name would leave the resumer to resume a key with either one's steps.
func operations[TTx any](ops []*Operation[TTx]) (map[string]*Operation[TTx], error) {
	byName := make(map[string]*Operation[TTx], len(ops))
	for _, op := range ops {
		if err := op.check(); err != nil {
			return nil, err
		}
		if byName[op.Name] != nil {
			return nil, fmt.Errorf("%w: two operations named %q", sqlonce.ErrInvalidArgument, op.Name)
		}
		byName[op.Name] = op
	}
	return byName, nil
}

func (s *Store[TTx]) resumeOne(ctx context.Context, k driver.Key, maxAttempts int, byName map[string]*Operation[TTx]) (done, gaveUp bool, err error) {
	o := obs.Start(s.observer, "dedupe", "ResumeStuck", k.Scope, k.Key)
	var res sqlonce.Result
	defer func() { err = o.End(ctx, res, err) }()
	var row driver.StepRow
	var found bool
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &o, func(ctx context.Context, tx TTx) (err error) {
		row, found, err = s.engine.StepGet(ctx, tx, k, testclock.Now(ctx))
		return err
	})
	if err != nil || !found || row.State != driver.StateLeased || row.Leased || row.Expired {
		return false, false, err // finished or taken over since it was listed
	}
	rec, err := recoveryOf(k, row, recovery{})
	if err == nil && row.Response == nil {
		err = fmt.Errorf("sqlonce/dedupe: key %q has no recovery point", k.Key)
	}
	// The response lives for the TTL of the key's first call, not the
	// Store's, which may be shorter: a repeat within that TTL must find
	// it.
	ttl := s.ttl
	if rec.ttl > 0 {
		ttl = rec.ttl
	}
	var end []byte
	switch {
	case err != nil:
		end = final(rec.op, true, []byte(err.Error()))
	case rec.attempts > maxAttempts:
		// The step it stopped at: the one whose error was recorded, or
		// else the first not done (a run that crashed, panicked or was
		// cancelled recorded none).
		step, text := rec.errStep, rec.errText
		if op := byName[rec.op]; step == "" && op != nil && len(rec.names) < len(op.Steps) {
			step = op.Steps[len(rec.names)].Name
		}
		if text == "" {
			text = "no step returned an error: its runs stopped (a crash, a panic, a context ended)"
		}
		end = givenUp(row.Response, rec.op, step, rec.attempts-1, ttl, text)
	}
	if end != nil {
		var ok bool
		err = owntx.RunObserved(ctx, s.engine, &o, func(ctx context.Context, tx TTx) (err error) {
			now := testclock.Now(ctx)
			token := row.Token
			if row.Response != nil {
				// Take the lapsed lease over first, as a resume does, and
				// only if the recovery point is still the one read: a run
				// gone past its lease but alive may have recorded a step
				// since, and the decision was made on what was read.
				// The next round looks at the key again.
				if ok, err = s.engine.StepResume(ctx, tx, k, row.Token, row.Response, row.Response, DefaultStepLease, now); err != nil || !ok {
					return err
				}
				token++
			}
			ok, err = s.engine.Complete(ctx, tx, k, token, end, ttl, now)
			return err
		})
		if err != nil || !ok {
			return false, false, err
		}
		res.Outcome = sqlonce.FirstRun
		return false, true, nil
	}
	op := byName[rec.op]
	if op == nil {
		return false, false, fmt.Errorf("%w: key %q in scope %q runs operation %q, which the resumer was not given", sqlonce.ErrInvalidArgument, k.Key, k.Scope, rec.op)
	}
	token, ok, err := s.stepResume(ctx, k, row, rec, op.lease(), &o)
	if err != nil || !ok {
		return false, false, err
	}
	o.Decided()
	o.Takeover()
	res, err = s.resumeSteps(ctx, k, token, rec, op, ttl, &o)
	return err == nil, false, err
}

// resumeSteps is runStepsFrom for the resumer, which has no caller to
// hand a step's panic to: the panic stops the key's run as it stops
// RunSteps' (the step's transaction rolled back, the lease left to lapse)
// and comes back as the key's error, with the stack, so that one bad key
// does not end the program that runs ResumeEvery.
func (s *Store[TTx]) resumeSteps(ctx context.Context, k driver.Key, token int64, rec recovery, op *Operation[TTx], ttl time.Duration, o *obs.Op) (res sqlonce.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res = sqlonce.Result{}
			err = stepPanic(k, op.Name, p, debug.Stack())
		}
	}()
	return s.runStepsFrom(ctx, k, token, rec, op, ttl, o)
}

// stepPanic is the error of a run of operation op on k whose step
// panicked with p; a p that is an error stays matchable (errors.Is).
func stepPanic(k driver.Key, op string, p any, stack []byte) error {
	if e, ok := p.(error); ok {
		return fmt.Errorf("sqlonce/dedupe: key %q in scope %q: a step of operation %q panicked: %w\n%s", k.Key, k.Scope, op, e, stack)
	}
	return fmt.Errorf("sqlonce/dedupe: key %q in scope %q: a step of operation %q panicked: %v\n%s", k.Key, k.Scope, op, p, stack)
}

// ResumeEvery runs ResumeStuck every interval, until ctx is done, and
// then returns ctx's error; bad input (an interval under a millisecond,
// maxAttempts under 1, a bad operation, two operations of one name)
// returns an error matching sqlonce.ErrInvalidArgument at once. Start it
// once per program, in a goroutine of its own, with every Operation the
// program runs:
//
//	go store.ResumeEvery(ctx, time.Minute, 5, checkout)
//
// A panic in a step is recovered as ResumeStuck says, so it does not end
// the program; when ctx ends during a step, that key's lease is left to
// lapse and the next round, here or on another instance, resumes it.
//
// Every instance may run it: they elect one among them as PurgeEvery does
// (a lease on a row of sqlonce_keys, held for two intervals and extended
// at every round), and the others skip the round. An operation is taken
// up once its lease has lapsed: Operation.Lease is the bound on how long
// it may stay between steps.
//
// Each round is reported to the driver's Observer as an Event with
// Operation "ResumeEvery": EventFirstRun and the operations finished or
// given up in Rows when this instance ran the round, EventAlreadyDone
// when another holds the lease, EventError with the error otherwise; and
// each key it looks at as an Event with Operation "ResumeStuck":
// EventTakeover for a key it resumed and finished, EventFirstRun for one
// it gave up, the error for one it could not finish.
func (s *Store[TTx]) ResumeEvery(ctx context.Context, interval time.Duration, maxAttempts int, ops ...*Operation[TTx]) error {
	if interval < time.Millisecond {
		return fmt.Errorf("%w: resumer interval %v is shorter than 1ms", sqlonce.ErrInvalidArgument, interval)
	}
	if maxAttempts < 1 {
		return fmt.Errorf("%w: max attempts %d is under 1", sqlonce.ErrInvalidArgument, maxAttempts)
	}
	if _, err := operations(ops); err != nil {
		return err
	}
	lease := purgerLeaseFor(interval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var token int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		token = s.resumeRound(ctx, lease, token, maxAttempts, ops)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *Store[TTx]) resumeRound(ctx context.Context, lease time.Duration, token int64, maxAttempts int, ops []*Operation[TTx]) int64 {
	op := obs.Start(s.observer, "dedupe", "ResumeEvery", "", "")
	var (
		res sqlonce.Result
		n   int
		err error
	)
	defer func() {
		op.Rows(int64(n))
		op.End(ctx, res, err)
	}()
	held, err := s.electLease(ctx, s.resumerKey(), lease, token, &op)
	if err != nil {
		return token
	}
	if token = held; token == 0 {
		res.Outcome = sqlonce.AlreadyDone
		return 0
	}
	op.Decided()
	finished, failed, err := s.ResumeStuck(ctx, maxAttempts, ops...)
	n = finished + failed
	if err == nil {
		res.Outcome = sqlonce.FirstRun
	}
	return token
}
