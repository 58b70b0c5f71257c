package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// Racers is how many goroutines a race case runs on the same keys: 32,
// and 16 under -short (this package's TestMain), where every key of a
// race case still has two racers or more (RaceSameKey's widest round
// spreads them over 8 keys) but the inner loop's two cores are not spent
// on the 16 others. The anti-pattern cases, which must see the race the
// suite guards against happen, keep antiPatternRacers.
var Racers = 32

// ctxT is a case's context: a bound for a case that hangs, generous enough
// for the ten configurations running at once on a loaded 2-core machine.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// retryTx runs fn in a transaction at iso, retrying from the start while
// the error is one sqlonce.IsRetryable accepts, as a careful caller does.
func retryTx[TTx any](ctx context.Context, db harness.DB[TTx], iso harness.Isolation, fn func(tx TTx) error) (retries int, err error) {
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err = harness.WithTx(ctx, db, iso, fn)
		if err == nil || !sqlonce.IsRetryable(err) || attempt >= 200 {
			return attempt, err
		}
		// Jittered, growing backoff: a fixed pace lets racers that deadlock
		// on MySQL gap locks meet again at the same moment, forever.
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// race runs n goroutines released together and collects their errors.
func race(n int, fn func(i int) error) []error {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("racer %d: %v", i, err)
		}
	}
}

// counter counts outcomes reported by racers.
type counter struct{ first, done atomic.Int64 }

func (c *counter) add(r sqlonce.Result) {
	switch r.Outcome {
	case sqlonce.FirstRun:
		c.first.Add(1)
	case sqlonce.AlreadyDone:
		c.done.Add(1)
	}
}

func (c *counter) String() string {
	return fmt.Sprintf("first=%d done=%d", c.first.Load(), c.done.Load())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
