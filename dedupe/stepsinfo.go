package dedupe

import (
	"context"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
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
