package pgsqldriver

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Every program that links this package classifies the PostgreSQL errors
// of both database/sql drivers, from sqlonce and from its own queries
// alike (sqlonce.IsRetryable).
func init() { driver.Register(driver.ClassifierFunc(classify)) }

// PostgreSQL SQLSTATE codes sqlonce acts on.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03"
	codeQueryCanceled        = "57014"
	codeReadOnlyTransaction  = "25006" // a hot standby, a read-only transaction
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
)

// sqlStater is what a PostgreSQL error of either database/sql driver
// has: pgx's *pgconn.PgError and lib/pq's *pq.Error both report their
// SQLSTATE through it. Matching the method, not the types, keeps each
// library out of the programs that use the other.
type sqlStater interface {
	SQLState() string
}

// sqlState returns the SQLSTATE of err itself (not of the errors it
// wraps), or "" if err is no PostgreSQL error.
func sqlState(err error) string {
	if s, ok := err.(sqlStater); ok {
		return s.SQLState()
	}
	return ""
}

// classify reads one error of a tree by its SQLSTATE. The network errors
// both libraries return (io.ErrUnexpectedEOF, *net.OpError, a refused
// dial, driver.ErrBadConn) and sql.ErrTxDone are the standard library's,
// classified by package driver. pgx's *pgconn.ConnectError, a connection
// that could not be opened, is NotSent (see isConnectError), and so is
// 57P03.
func classify(err error) driver.Class {
	if isConnectError(err) {
		return driver.NotSent
	}
	switch sqlState(err) {
	case codeSerializationFailure, codeDeadlockDetected:
		return driver.Retryable
	case codeLockNotAvailable:
		return driver.Retryable | driver.LockNotAvailable
	case codeUniqueViolation:
		return driver.Unique
	case codeReadOnlyTransaction:
		return driver.ReadOnly
	case codeCannotConnectNow:
		// Only ever the answer to a connection's startup: the server
		// refuses the session while it starts, shuts down or recovers.
		return driver.ConnLost | driver.NotSent
	case codeAdminShutdown, codeCrashShutdown:
		// The server ends the session as it shuts down (a failover's old
		// primary, a restart) or refuses it while starting: the
		// connection is gone like a broken one, and a COMMIT it answered
		// may have committed.
		return driver.ConnLost
	}
	return 0
}

// isConnectError reports whether err is pgx's *pgconn.ConnectError, which
// its database/sql adapter returns when a connection could not be opened:
// nothing was sent on it. Matched by the type's name, so that lib/pq's
// programs do not link pgx.
func isConnectError(err error) bool {
	t := reflect.TypeOf(err)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().Name() == "ConnectError" &&
		t.Elem().PkgPath() == "github.com/jackc/pgx/v5/pgconn"
}

// canceled makes err, the error of a statement that ctx cancelled, match
// ctx's error, as pgx's do: lib/pq cancels the statement on the server and
// returns only the server's answer (57014, query_canceled).
func canceled(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ctx.Err()) {
		return err
	}
	if driver.Walk(err, func(e error) bool { return sqlState(e) == codeQueryCanceled }) {
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// constraintName returns the constraint a PostgreSQL error names: the
// string field ConstraintName of *pgconn.PgError, Constraint of *pq.Error
// (both from the protocol's 'n' field). Neither library has a method for
// it.
func constraintName(err error) string {
	s, _ := stringField(err, "ConstraintName", "Constraint")
	return s
}

// stringField returns the first of the named string fields that the struct
// err points to has; ok false: it has none of them.
func stringField(err error, names ...string) (s string, ok bool) {
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return "", false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return "", false
	}
	for _, name := range names {
		if f := v.FieldByName(name); f.IsValid() && f.Kind() == reflect.String {
			return f.String(), true
		}
	}
	return "", false
}

// lockElsewhere reports whether an error of err's tree is a lock wait that
// gave up (55P03, lock_timeout) on something other than a row. PostgreSQL
// names the row in the error's context, the string field Where of both
// libraries' errors, when it waits for the transaction that holds it
// ("while inserting index tuple ..." for the claim's INSERT, "while
// updating tuple ..." for a takeover's UPDATE); the wait for a table's
// lock, or for the lock on growing the table's file, has none. So have two
// short waits on the key itself: for an INSERT of the same key at the
// instant it inserts (a speculative insertion), and for the place in the
// queue of a row's lock; the next attempt waits for the row's
// transaction, and names it. Only
// whether the context is empty is read: its words follow the server's
// lc_messages. An error of another library, without the field, is the
// key's.
func lockElsewhere(err error) bool {
	return driver.Walk(err, func(e error) bool {
		if sqlState(e) != codeLockNotAvailable {
			return false
		}
		where, ok := stringField(e, "Where")
		return ok && where == ""
	})
}

// uniqueViolation reports whether an error of err's tree is a unique
// violation on the named constraint. An empty constraint matches any.
func uniqueViolation(err error, constraint string) bool {
	return driver.Walk(err, func(e error) bool {
		return sqlState(e) == codeUniqueViolation && (constraint == "" || constraintName(e) == constraint)
	})
}
