package owntx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

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
