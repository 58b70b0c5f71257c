package owntx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/owntx"
	// The classifier of pgx's errors, as a program linking pgxdriver has.
	_ "github.com/sqlonce/sqlonce/pgxdriver"
)

// A transaction whose COMMIT may have committed is not sent again, even
// when its error also holds a retry request (a serialization failure the
// broken connection reported with it): a resend could do the work twice.
func TestRetryDoesNotResendAnUnknownCommit(t *testing.T) {
	unknown := fmt.Errorf("%w: %w", sqlonce.ErrCommitUnknown, &pgconn.PgError{Code: pgerrcode.SerializationFailure})
	calls := 0
	err := owntx.Retry(context.Background(), func() error {
		calls++
		return unknown
	})
	if calls != 1 || !errors.Is(err, sqlonce.ErrCommitUnknown) {
		t.Fatalf("%d attempts, error %v: want 1 attempt and the unknown commit", calls, err)
	}
	// The serialization failure alone is run again.
	calls = 0
	err = owntx.Retry(context.Background(), func() error {
		calls++
		if calls < 3 {
			return &pgconn.PgError{Code: pgerrcode.SerializationFailure}
		}
		return nil
	})
	if calls != 3 || err != nil {
		t.Fatalf("%d attempts, error %v: want 3 attempts and success", calls, err)
	}
}

// A conflict that outlasts a few quick attempts does not use them all up:
// the attempts are spread over more than 300 ms. Here the conflicting
// transaction runs for 300 ms and every attempt meanwhile is refused, as
// on a loaded server where the transactions that collide take longer than
// a pause of a few milliseconds (the pauses were 1 to 2n+1 ms, 99 ms at
// most in all, and the tenth attempt was refused too).
func TestRetryOutlastsAConflict(t *testing.T) {
	const conflict = 300 * time.Millisecond
	start := time.Now()
	calls := 0
	err := owntx.Retry(context.Background(), func() error {
		calls++
		if time.Since(start) < conflict {
			return &pgconn.PgError{Code: pgerrcode.SerializationFailure}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after %d attempts in %v: %v, want the attempt after the conflict to succeed", calls, time.Since(start), err)
	}
	if calls < 2 || calls > owntx.Attempts {
		t.Fatalf("%d attempts, want 2 to %d", calls, owntx.Attempts)
	}
}

// A pause ends when the context does.
func TestPauseEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if owntx.Pause(ctx, owntx.Attempts) {
		t.Fatal("Pause on an ended context reported true")
	}
}
