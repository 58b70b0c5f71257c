package dedupe

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce/internal/storecfg"
)

// The pauses of a repeat that WithAwaitResult makes wait: the first, and
// the longest they double to.
const (
	awaitFirstPause = 5 * time.Millisecond
	awaitMaxPause   = 250 * time.Millisecond
)

// WithAwaitResult makes a repeat of a key whose work is in progress wait
// for the answer instead of returning sqlonce.ErrInProgress: "attach to
// the running work". It applies to Run, RunJSON and RunSteps. Such a
// call asks for the key again after pauses of 5 ms doubling up to 250 ms
// (holding no connection in between), and each time the database
// decides, on its own clock, what the key is. The call returns:
//   - AlreadyDone with the recorded response once the first run, a
//     retry or the resumer (ResumeStuck) finishes the work;
//   - FirstRun when the holder's lease lapses and this call takes the key
//     over and runs the work itself (for RunSteps, from the last recovery
//     point); among many waiting repeats one does, the others wait on;
//   - ErrOperationFailed (RunSteps) once the resumer gave the operation
//     up; sqlonce.ErrKeyReuse and the other answers as without the option;
//   - when ctx ends while it waits: an error matching both ctx's error
//     (context.DeadlineExceeded, context.Canceled) and
//     sqlonce.ErrInProgress.
//
// What is waited for: a lease taken by Claim (Run), another run's lease
// (RunSteps), and, with WithNoWait or WithLockWait, another transaction
// holding the key (Run), which then holds a connection for at most the
// lock wait per ask. Without WithNoWait and WithLockWait a Run already
// waits on the key's lock for a Run in its transaction, and the option
// changes nothing there; a ctx that ends during that lock wait returns
// ctx's error alone. An operation of RunSteps stopped (its lease lapsed)
// is resumed by the call at once, as without the option. The call never
// waits for an error of fn or of a step: those are returned as they are.
// Do, DoResponse, DoJSON, the Tx methods and Claim are unaffected: a
// Claim still answers ErrInProgress. Bound the wait with ctx.
func WithAwaitResult() Option {
	return func(o *storecfg.Options) error {
		o.AwaitResult = true
		return nil
	}
}

// awaiter paces a repeat that WithAwaitResult makes wait for a key's
// answer.
type awaiter struct {
	pause time.Duration
	busy  error // the last sqlonce.ErrInProgress the key answered
}

// wait pauses after busy, an error matching sqlonce.ErrInProgress, and
// returns nil, or, when ctx ends first, ctx's error with busy.
func (w *awaiter) wait(ctx context.Context, busy error) error {
	w.busy = busy
	w.pause = min(max(2*w.pause, awaitFirstPause), awaitMaxPause)
	t := time.NewTimer(w.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return w.ended(ctx.Err())
	case <-t.C:
		return nil
	}
}

// ended returns err, the error of a ctx that ended while the call waited,
// matching also the sqlonce.ErrInProgress it waited on, if any.
func (w *awaiter) ended(err error) error {
	if w.busy == nil {
		return err
	}
	return fmt.Errorf("%w while waiting: %w", err, w.busy)
}
