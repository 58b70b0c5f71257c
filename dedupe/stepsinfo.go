package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// StepsInfo describes the key of an operation of several steps
// (RunSteps), as Store.InspectSteps reads it: the key, and where its
// operation stands.
type StepsInfo struct {
	KeyInfo
	// Operation is the Operation.Name of the operation, unfinished (leased
	// or lapsed), done or given up: a call with another operation is
	// refused. "" for a key done or given up by a pre-release build,
	// which did not record it.
	Operation string
	// Done names the steps an unfinished operation has done, in order: a
	// retry or the resumer goes on after the last.
	Done []string
	// Attempts counts the runs of an unfinished operation that held its
	// lease, and those of an operation given up.
	Attempts int
	// Failed is why ResumeStuck gave the operation up ("" otherwise):
	// the text of the error of the step that stopped its last run (at
	// most 1024 bytes), or, when none was recorded (its runs crashed,
	// panicked or had their context end), what it found. Every repeat
	// gets ErrOperationFailed until the key is forgotten.
	Failed string
	// FailedStep is the step at which an operation given up stopped:
	// the step whose error Failed is, or else the first step not done;
	// "" when unknown (an operation the resumer was not given, or given
	// up by an earlier build).
	FailedStep string
	// FailedAt is when ResumeStuck gave the operation up, by the
	// database's clock; zero unless given up (and for an operation given
	// up by an earlier build).
	FailedAt time.Time
}

// InspectSteps reads the key of an operation of several steps run by
// RunSteps (never a key of Do, Run or Claim, nor another scope's), on the
// driver's database handle, with where the
// operation stands: to see why a customer's operation stopped. Its errors
// are Inspect's.
func (s *Store[TTx]) InspectSteps(ctx context.Context, scope, key string) (info StepsInfo, err error) {
	op := obs.Start(s.observer, "dedupe", "InspectSteps", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	ki, row, err := s.inspect(ctx, s.stepsKey(scope, key), true, &op)
	if err != nil {
		return StepsInfo{}, err
	}
	info.KeyInfo = ki
	switch {
	case row.State == driver.StateLeased:
		if rec, err := decodeRecovery(row.Response); err == nil {
			info.Operation, info.Done, info.Attempts = rec.op, rec.names, rec.attempts
		}
	case len(row.Response) > 0:
		if end, err := decodeFinal(row.Response); err == nil {
			info.Operation = end.op
			if end.failed {
				info.Failed = string(end.payload)
				info.FailedStep, info.Attempts = end.step, end.attempts
				if end.attempts > 0 && !ki.Expires.IsZero() {
					// The end was recorded for end.ttl from then.
					info.FailedAt = ki.Expires.Add(-end.ttl)
				}
			}
		}
	}
	return info, nil
}

// ForgetSteps deletes the key of an operation of several steps run by
// RunSteps, as Forget deletes a key of Do, Run or Claim: the next
// RunSteps with the key starts the operation from its first step, so that
// a given-up operation (ErrOperationFailed) can run again once its cause
// is fixed. A run that holds its lease is refused with an error matching
// sqlonce.ErrInProgress unless ForgetLeased; the steps already done are
// not undone. Its errors are Forget's.
func (s *Store[TTx]) ForgetSteps(ctx context.Context, scope, key string, opts ...ForgetOption) (err error) {
	op := obs.Start(s.observer, "dedupe", "ForgetSteps", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	return s.forget(ctx, s.stepsKey(scope, key), opts, &op)
}

// ErrNotRedrivable is Redrive's refusal of a key whose operation was not
// given up: running, stopped (a retry or the resumer goes on with it) or
// done; or given up by an earlier build, which kept no recovery point
// (ForgetSteps lets its next run start from the first step).
var ErrNotRedrivable = errors.New("sqlonce/dedupe: the operation was not given up with a recovery point")

// Redrive turns the key of an operation given up by ResumeStuck
// (ErrOperationFailed) back into a stopped operation, on the driver's
// database handle, once the cause is fixed: the next RunSteps with the
// key, or the resumer, goes on from its last recovery point (the steps
// done are not run again), with a fresh count of attempts, and the key
// lives at least the TTL of its first call (the Store's when it set none)
// from now.
//
// It returns an error matching sqlonce.ErrNotFound for no such key (or an
// expired one), ErrNotRedrivable for a key not given up, or given up by an
// earlier build, and sqlonce.ErrInvalidKey for a bad scope or key. Calls
// racing on one key, here or on other instances, re-drive it once: the
// others get ErrNotRedrivable.
func (s *Store[TTx]) Redrive(ctx context.Context, scope, key string) (err error) {
	o := obs.Start(s.observer, "dedupe", "Redrive", scope, key)
	defer func() { err = o.Done(ctx, err, sqlonce.ErrNotFound, ErrNotRedrivable) }()
	if err := checkKey(scope, key); err != nil {
		return err
	}
	k := s.stepsKey(scope, key)
	var row driver.StepRow
	var found bool
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &o, func(ctx context.Context, tx TTx) (err error) {
		row, found, err = s.engine.StepGet(ctx, tx, k, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlonce/dedupe: redrive key %q in scope %q: %w", key, scope, err)
	}
	if !found || row.Expired {
		return notFound(scope, key)
	}
	if row.State != driver.StateDone {
		state := "stopped: a retry or the resumer goes on with it"
		if row.Leased {
			state = "running"
		}
		return fmt.Errorf("%w: key %q in scope %q is %s", ErrNotRedrivable, key, scope, state)
	}
	end, err := decodeFinal(row.Response)
	switch {
	case err != nil:
		return fmt.Errorf("sqlonce/dedupe: redrive key %q in scope %q: %w", key, scope, err)
	case !end.failed:
		return fmt.Errorf("%w: key %q in scope %q is done", ErrNotRedrivable, key, scope)
	case end.recovery == nil:
		return fmt.Errorf("%w: key %q in scope %q was given up by an earlier build, which kept no recovery point: forget it (ForgetSteps) to start it anew", ErrNotRedrivable, key, scope)
	}
	rec, err := decodeRecovery(end.recovery)
	if err != nil {
		return fmt.Errorf("sqlonce/dedupe: redrive key %q in scope %q: %w", key, scope, err)
	}
	// A fresh count: the next run is attempt 1.
	rec.attempts, rec.errStep, rec.errText = 0, "", ""
	ttl := s.ttl
	if rec.ttl > 0 {
		ttl = rec.ttl
	}
	var ok bool
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &o, func(ctx context.Context, tx TTx) (err error) {
		ok, err = s.engine.StepRedrive(ctx, tx, k, row.Token, row.Response, rec.encode(), ttl, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlonce/dedupe: redrive key %q in scope %q: %w", key, scope, err)
	}
	if !ok {
		return fmt.Errorf("%w: key %q in scope %q changed since it was read (re-driven, forgotten or expired)", ErrNotRedrivable, key, scope)
	}
	return nil
}
