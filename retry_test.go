package sqlonce_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce"
	// sqlonce.IsRetryable knows the errors of the drivers a program links.
	_ "github.com/sqlonce/sqlonce/mysqldriver"
	_ "github.com/sqlonce/sqlonce/pgxdriver"
)

func TestIsRetryable(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code} }
	my := func(n uint16) error { return &mysql.MySQLError{Number: n} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"stale read", sqlonce.ErrStaleRead, true},
		{"stale read wrapped", fmt.Errorf("%w: version still reads 3", sqlonce.ErrStaleRead), true},
		{"pg 40001", pg(pgerrcode.SerializationFailure), true},
		{"pg 40P01", pg(pgerrcode.DeadlockDetected), true},
		{"pg 55P03", pg(pgerrcode.LockNotAvailable), true},
		{"pg 23505", pg(pgerrcode.UniqueViolation), false},
		{"pg 25P02", pg(pgerrcode.InFailedSQLTransaction), false},
		{"mysql 1213", my(1213), true},
		{"mysql 1205", my(1205), true},
		{"mariadb 1020", my(1020), true},
		{"mysql 1062", my(1062), false},
		{"wrapped by a caller", fmt.Errorf("charge order 7: %w", pg(pgerrcode.SerializationFailure)), true},
		{"joined", errors.Join(my(1213), errors.New("rollback to savepoint failed")), true},
		// A transaction the server rolled back is retryable whatever error
		// comes first: unique.Insert's duplicate joined to the deadlock its
		// savepoint rollback met.
		{"duplicate joined to deadlock", errors.Join(my(1062), fmt.Errorf("rollback to savepoint: %w", my(1213))), true},
		{"pg duplicate joined to serialization failure", errors.Join(pg(pgerrcode.UniqueViolation), pg(pgerrcode.SerializationFailure)), true},
		{"stale read joined", errors.Join(my(1062), sqlonce.ErrStaleRead), true},
		{"sentinels that are not", sqlonce.ErrInProgress, false},
		{"not found", sqlonce.ErrNotFound, false},
		{"invalid transition", sqlonce.ErrInvalidTransition, false},
		{"lease lost", sqlonce.ErrLeaseLost, false},
		{"key reuse", sqlonce.ErrKeyReuse, false},
		{"no rows", sql.ErrNoRows, false},
		{"canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
		// A COMMIT that may have committed is never run again, even when
		// the tree also holds a retry request.
		{"commit unknown", sqlonce.ErrCommitUnknown, false},
		{"commit unknown over a serialization failure", fmt.Errorf("%w: %w", sqlonce.ErrCommitUnknown, pg(pgerrcode.SerializationFailure)), false},
		{"commit unknown joined to a deadlock", errors.Join(my(1213), fmt.Errorf("commit: %w", sqlonce.ErrCommitUnknown)), false},
		{"commit unknown joined to a stale read", errors.Join(sqlonce.ErrStaleRead, sqlonce.ErrCommitUnknown), false},
	} {
		if got := sqlonce.IsRetryable(tc.err); got != tc.want {
			t.Errorf("%s: sqlonce.IsRetryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Every sentinel is distinct and says it comes from sqlonce, so that
// errors.Is never confuses two of them and logs name the library.
func TestSentinelsDistinct(t *testing.T) {
	all := []error{sqlonce.ErrInvalidKey, sqlonce.ErrInvalidArgument, sqlonce.ErrResponseTooLarge, sqlonce.ErrKeyReuse, sqlonce.ErrInProgress,
		sqlonce.ErrNotFound, sqlonce.ErrInvalidTransition, sqlonce.ErrLeaseLost, sqlonce.ErrTooManyRows, sqlonce.ErrStaleRead, sqlonce.ErrCommitUnknown}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v)", a, b)
			}
		}
		if msg := a.Error(); len(msg) < 9 || msg[:9] != "sqlonce: " {
			t.Errorf("%q does not start with \"sqlonce: \"", msg)
		}
	}
}
