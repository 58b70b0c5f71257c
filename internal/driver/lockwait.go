package driver

import (
	"context"
	"fmt"
	"time"
)

// PastOtherLocks runs attempt, a claim whose lock waits are bounded
// (dedupe.WithNoWait, WithLockWait) and which leaves the transaction as it
// found it when it gives up, and runs it again for as long as it gives up
// on a lock that is not the key's: notTheKey reports that of its error.
//
// The bound is on the wait for the key's holder. A database that bounds
// every lock wait of a statement alike (PostgreSQL's lock_timeout) also
// cancels the wait for a table lock (a DDL statement, VACUUM truncating
// the table's end, an explicit LOCK TABLE) or for the lock that
// serializes the growth of the table's file; answering
// sqlonce.ErrInProgress for those would tell the client that a key nobody
// holds is in progress. Those waits end on their own: the claim waits
// them out, pausing between attempts (1 ms, doubling up to 64 ms), until
// ctx ends, and then returns ctx's error.
func PastOtherLocks[T any](ctx context.Context, notTheKey func(error) bool, attempt func() (T, error)) (T, error) {
	pause := time.Millisecond
	for {
		v, err := attempt()
		if err == nil || !notTheKey(err) {
			return v, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			// The cause is formatted, not wrapped: this is no answer
			// about the key (no sqlonce.ErrInProgress), only ctx's.
			return v, fmt.Errorf("%w (waiting for a lock that is not the key's: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
		pause = min(2*pause, 64*time.Millisecond)
	}
}
