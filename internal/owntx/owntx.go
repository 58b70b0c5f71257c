package owntx

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Attempts bounds the runs of one transaction.
const Attempts = 10

// Run runs fn in a transaction of its own on e's handle, committing when
// fn returns nil. The transaction is sqlonce's, so after a deadlock or a
// serialization failure it is run again here rather than handed back to a
// caller who could only call again. A lock wait that timed out is not run
// again: it has waited already.
func Run[TTx any](ctx context.Context, e driver.Engine[TTx], fn func(ctx context.Context, tx TTx) error) error {
	return Retry(ctx, func() error { return e.InTx(ctx, fn) })
}

// Retry calls attempt, which runs a transaction of sqlonce's own, until it
// succeeds or fails in a way that running it again cannot mend, at most
// Attempts times, pausing between attempts.
//
// An error matching sqlonce.ErrCommitUnknown is returned, not resent:
// the transaction may have committed, and a resend's answer would then
// differ from the first attempt's (a lease's Complete answers
// ErrLeaseLost, a Claim ErrInProgress against its own lease, a Run
// AlreadyDone for work this very call did). Only the caller knows what
// its request was; resending it with the same key is safe.
func Retry(ctx context.Context, attempt func() error) error {
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || n == Attempts || !sqlonce.IsRetryable(err) || driver.Classify(err).Has(driver.LockNotAvailable) {
			return err
		}
		if !Pause(ctx, n) {
			return err
		}
	}
}

// Pause sleeps before attempt+1, so that the transactions that collided
// do not meet again. It reports false when ctx ended first.
//
// The pause is a random moment between half and all of a bound that
// doubles with each attempt, 2 ms before the second up to maxPause: the
// pauses before the last of Attempts total 377 to 754 ms. Pauses of a few
// milliseconds are shorter than the transactions themselves on a loaded
// server, so that the same transactions met again at every attempt until
// the attempts ran out (4 requests on one serializable table behind a
// pooler, one of them refused 10 times in a row).
func Pause(ctx context.Context, attempt int) bool {
	bound := pauseBound(attempt)
	return sleep(ctx, bound/2, bound/2)
}

// maxPause bounds the pause before one attempt.
const maxPause = 250 * time.Millisecond

// pauseBound is the longest pause after attempt n (1 is the first).
func pauseBound(n int) time.Duration {
	d := 2 * time.Millisecond
	for i := 1; i < n && d < maxPause; i++ {
		d *= 2
	}
	return min(d, maxPause)
}

// sleep sleeps for least plus a random moment of up to upTo; false when
// ctx ended first.
func sleep(ctx context.Context, least, upTo time.Duration) bool {
	t := time.NewTimer(least + rand.N(upTo+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
