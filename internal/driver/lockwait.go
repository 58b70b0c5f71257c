package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// OtherLocksWait is how long a claim whose lock waits are bounded goes on
// attempting past locks that are not the key's (see PastOtherLocks), at
// least; a longer lock wait bound is the limit instead.
const OtherLocksWait = 2 * time.Second

// PastOtherLocks runs attempt, a claim whose lock waits are bounded by
// lockWait (dedupe.WithNoWait, WithLockWait) and which leaves the
// transaction as it found it when it gives up, and runs it again while it
// gives up on a lock that is not the key's: notTheKey reports that of its
// error.
//
// The bound is on the wait for the key's holder. A database that bounds
// every lock wait of a statement alike (PostgreSQL's lock_timeout) also
// cancels the wait for a table lock (a DDL statement, VACUUM truncating
// the table's end, an explicit LOCK TABLE) or for the lock that
// serializes the growth of the table's file; answering
// sqlonce.ErrInProgress for those would tell the client that a key nobody
// holds is in progress. Those waits are short: the claim waits them out,
// pausing between attempts (1 ms, doubling up to 64 ms), for at most the
// longer of lockWait and OtherLocksWait, and then returns an error that
// is retryable (roll back, run again) and no ErrInProgress. The limit
// keeps a lock that waits for the caller's own transaction (a DDL queued
// behind it) from holding the claim, a deadlock that no attempt waits
// long enough for the server to detect. When ctx ends first, the error is
// ctx's.
//
// An attempt whose transaction could not be restored (see NotRestored)
// is not run again.
func PastOtherLocks[T any](ctx context.Context, lockWait time.Duration, notTheKey func(error) bool, attempt func() (T, error)) (T, error) {
	start := time.Now()
	limit := max(lockWait, OtherLocksWait)
	pause := time.Millisecond
	for {
		v, err := attempt()
		if err == nil || !notTheKey(err) {
			return v, err
		}
		if ctx.Err() != nil {
			// Ended during the attempt, its rollback refused for it
			// (NotRestored) or not.
			return v, ctxEnded(ctx, err)
		}
		if errors.Is(err, errNotRestored) {
			return v, err
		}
		waited := time.Since(start)
		if waited+pause > limit {
			return v, &OtherLockError{Waited: waited, cause: err.Error()}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, ctxEnded(ctx, err)
		case <-t.C:
		}
		pause = min(2*pause, 64*time.Millisecond)
	}
}

// ctxEnded is ctx's error for a claim that ended waiting on a lock that is
// not the key's: err is formatted, not wrapped, as this is no answer about
// the key (no sqlonce.ErrInProgress).
func ctxEnded(ctx context.Context, err error) error {
	return fmt.Errorf("%w (waiting for a lock that is not the key's: %v)", context.Cause(ctx), err)
}

// OtherLockError is PastOtherLocks giving up: the claim met locks that are
// not the key's for Waited. It is Retryable and nothing else: roll the
// transaction back and run it again, later; the key is not known to be in
// progress.
type OtherLockError struct {
	Waited time.Duration
	cause  string
}

func (e *OtherLockError) Error() string {
	return fmt.Sprintf("the claim waited %v for locks that are not the key's (the key table's, taken by DDL, VACUUM or LOCK TABLE; or its file's growth) and gave up: %s",
		e.Waited.Round(time.Millisecond), e.cause)
}

// errNotRestored marks an error after which the transaction could not be
// put back as it was (NotRestored).
var errNotRestored = errors.New("rollback to savepoint")

// NotRestored is err, an attempt's error, joined to rbErr, the error of the
// rollback to the savepoint that was to undo the attempt: the transaction
// is not as the attempt found it, and PastOtherLocks does not attempt
// again.
func NotRestored(err, rbErr error) error {
	return errors.Join(err, fmt.Errorf("%w: %w", errNotRestored, rbErr))
}
