package pgxdriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/internal/driver"
)

func pgErr(code, constraint string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, ConstraintName: constraint, Message: "test"}
}

// TestClassify checks the classes of pgx's errors, alone and anywhere in
// a wrapped or joined tree, as driver.Classify reports them in a program
// that links this package.
func TestClassify(t *testing.T) {
	const (
		retry  = driver.Retryable
		lock   = driver.LockNotAvailable
		unique = driver.Unique
		done   = driver.TxDone
		lost   = driver.ConnLost
	)
	dup := pgErr(pgerrcode.UniqueViolation, "orders_code_key")
	for _, tc := range []struct {
		name string
		err  error
		want driver.Class
	}{
		{"nil", nil, 0},
		{"serialization failure", pgErr(pgerrcode.SerializationFailure, ""), retry},
		{"deadlock", pgErr(pgerrcode.DeadlockDetected, ""), retry},
		{"lock not available", pgErr(pgerrcode.LockNotAvailable, ""), retry | lock},
		{"unique violation", dup, unique},
		{"aborted tx", pgErr(pgerrcode.InFailedSQLTransaction, ""), 0},
		{"query canceled", pgErr(pgerrcode.QueryCanceled, ""), 0},
		{"exclusion", pgErr(pgerrcode.ExclusionViolation, "x"), 0},
		// A hot standby, a read-only transaction.
		{"read-only transaction", pgErr(pgerrcode.ReadOnlySQLTransaction, ""), driver.ReadOnly},
		// The session ended by a server shutting down (a failover's old
		// primary), crashed or not yet taking sessions.
		{"admin shutdown", pgErr(pgerrcode.AdminShutdown, ""), lost},
		{"crash shutdown", pgErr(pgerrcode.CrashShutdown, ""), lost},
		{"cannot connect now", pgErr(pgerrcode.CannotConnectNow, ""), lost | driver.NotSent},
		// A connection that could not be opened sent nothing.
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, lost | driver.NotSent},
		{"connect error", &pgconn.ConnectError{}, driver.NotSent},
		{"tx closed", pgx.ErrTxClosed, done},
		{"database/sql tx done", sql.ErrTxDone, done},
		{"commit turned rollback", pgx.ErrTxCommitRollback, 0},
		{"wrapped", fmt.Errorf("tx: %w", pgErr(pgerrcode.SerializationFailure, "")), retry},
		// A duplicate whose savepoint rollback met the deadlock that ended
		// the transaction: both, whatever comes first.
		{"duplicate joined to deadlock", errors.Join(dup, fmt.Errorf("rollback to savepoint: %w", pgErr(pgerrcode.DeadlockDetected, ""))), unique | retry},
		{"deadlock joined to duplicate", errors.Join(pgErr(pgerrcode.DeadlockDetected, ""), dup), unique | retry},
		{"two %w", fmt.Errorf("%w; then %w", dup, pgErr(pgerrcode.SerializationFailure, "")), unique | retry},
		{"nested joins", errors.Join(io.EOF, errors.Join(errors.New("x"), fmt.Errorf("a: %w", pgErr(pgerrcode.LockNotAvailable, "")))), retry | lock},
		{"unexpected EOF", io.ErrUnexpectedEOF, lost},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, lost},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), lost},
		{"file errno is not the network's", fmt.Errorf("open: %w", syscall.ENOENT), 0},
		{"context canceled", context.Canceled, 0},
		{"deadline", context.DeadlineExceeded, 0},
		{"plain", errors.New("serialization failure"), 0},
	} {
		if got := driver.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %b, want %b", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestUniqueViolation(t *testing.T) {
	dup := pgErr(pgerrcode.UniqueViolation, "orders_code_key")
	for _, tc := range []struct {
		name       string
		err        error
		constraint string
		want       bool
	}{
		{"named", dup, "orders_code_key", true},
		{"any", dup, "", true},
		{"other", dup, "orders_ref_key", false},
		// PostgreSQL names are case-sensitive when quoted.
		{"case", dup, "ORDERS_CODE_KEY", false},
		{"wrapped", fmt.Errorf("insert: %w", dup), "orders_code_key", true},
		{"second of a join", errors.Join(pgErr(pgerrcode.UniqueViolation, "orders_ref_key"), dup), "orders_code_key", true},
		{"exclusion", pgErr(pgerrcode.ExclusionViolation, "orders_code_key"), "orders_code_key", false},
		{"aborted tx", pgErr(pgerrcode.InFailedSQLTransaction, ""), "", false},
		{"nil", nil, "", false},
	} {
		if got := uniqueViolation(tc.err, tc.constraint); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
