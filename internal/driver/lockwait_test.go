package driver

import (
	"context"
	"errors"
	"testing"
)

// lockTimeout stands for a driver's lock wait that gave up; elsewhere: on
// a lock that is not the key's.
type lockTimeout struct{ elsewhere bool }

func (e lockTimeout) Error() string { return "lock timeout" }

func elsewhere(err error) bool {
	return Walk(err, func(e error) bool { lt, ok := e.(lockTimeout); return ok && lt.elsewhere })
}

// A ctx that ends during an attempt whose rollback it then refused (the
// attempt's error joined to the rollback's, NotRestored) is ctx's error,
// not the lock's: a claim mapping the lock's error to ErrInProgress would
// answer "in progress" for a key nobody holds (seen in CI through
// PgBouncer).
func TestPastOtherLocksCtxEndsDuringAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempts := 0
	_, err := PastOtherLocks(ctx, 0, elsewhere, func() (int, error) {
		attempts++
		cancel()
		return 0, NotRestored(lockTimeout{elsewhere: true}, ctx.Err())
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want ctx's", err)
	}
	if elsewhere(err) || errors.Is(err, errNotRestored) {
		t.Errorf("error %v wraps the attempt's: a caller would read the lock timeout", err)
	}
	if attempts != 1 {
		t.Errorf("%d attempts, want 1", attempts)
	}
}

// An attempt that gave up on the key's own lock ends the loop at once, its
// error unchanged; one that gave up elsewhere is attempted again.
func TestPastOtherLocksAttemptsAgainOnlyElsewhere(t *testing.T) {
	ctx := context.Background()
	n := 0
	_, err := PastOtherLocks(ctx, 0, elsewhere, func() (int, error) {
		n++
		return 0, lockTimeout{elsewhere: n < 3}
	})
	if lt, ok := err.(lockTimeout); !ok || lt.elsewhere || n != 3 {
		t.Errorf("after %d attempts: %v, want the key's lock timeout after 3", n, err)
	}
	n = 0
	_, err = PastOtherLocks(ctx, 0, elsewhere, func() (int, error) {
		n++
		return 0, NotRestored(lockTimeout{elsewhere: true}, errors.New("conn closed"))
	})
	if !errors.Is(err, errNotRestored) || n != 1 {
		t.Errorf("after %d attempts: %v, want the NotRestored error after 1", n, err)
	}
}
