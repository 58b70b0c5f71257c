package sqlonce

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
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
		{"stale read", ErrStaleRead, true},
		{"stale read wrapped", fmt.Errorf("%w: version still reads 3", ErrStaleRead), true},
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
		{"sentinels that are not", ErrInProgress, false},
		{"not found", ErrNotFound, false},
		{"invalid transition", ErrInvalidTransition, false},
		{"lease lost", ErrLeaseLost, false},
		{"key reuse", ErrKeyReuse, false},
		{"no rows", sql.ErrNoRows, false},
		{"canceled", context.Canceled, false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("%s: IsRetryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Every sentinel is distinct and says it comes from sqlonce, so that
// errors.Is never confuses two of them and logs name the library.
func TestSentinelsDistinct(t *testing.T) {
	all := []error{ErrInvalidKey, ErrInvalidArgument, ErrResponseTooLarge, ErrKeyReuse, ErrInProgress,
		ErrNotFound, ErrInvalidTransition, ErrLeaseLost, ErrTooManyRows, ErrStaleRead, ErrNoDB}
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
