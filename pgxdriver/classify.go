package pgxdriver

import (
	"reflect"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Every program that links this package classifies pgx's errors, from
// sqlonce and from its own queries alike (sqlonce.IsRetryable).
func init() { driver.Register(driver.ClassifierFunc(classify)) }

// classify reads one error of a tree: a *pgconn.PgError by its SQLSTATE,
// pgx.ErrTxClosed. 25006 (read_only_sql_transaction: a hot standby, a
// read-only transaction) is ReadOnly; 57P01, 57P02 and 57P03 (the server
// shutting down, crashed, not yet accepting sessions) are ConnLost. The
// network errors pgconn returns after sending
// (io.ErrUnexpectedEOF, a *net.OpError, both unwrapped by pgconn) are the
// standard library's, classified by package driver; pgconn's own "conn
// closed" is one too (see isConnClosed).
//
// NotSent: a *pgconn.ConnectError (the connection could not be opened:
// nothing of a statement was sent), 57P03 (refused at startup), and an
// error pgconn says it returned before sending anything (SafeToRetry), but
// for "conn closed": pgconn gives that also for a batch's results read
// after the connection broke under a batch it had sent.
func classify(err error) driver.Class {
	if err == pgx.ErrTxClosed {
		return driver.TxDone
	}
	pgErr, ok := err.(*pgconn.PgError)
	if !ok {
		if isConnClosed(err) {
			return driver.ConnLost
		}
		if _, ok := err.(*pgconn.ConnectError); ok {
			return driver.NotSent
		}
		if s, ok := err.(interface{ SafeToRetry() bool }); ok && s.SafeToRetry() {
			return driver.NotSent
		}
		return 0
	}
	switch pgErr.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected:
		return driver.Retryable
	case pgerrcode.LockNotAvailable:
		return driver.Retryable | driver.LockNotAvailable
	case pgerrcode.UniqueViolation:
		return driver.Unique
	case pgerrcode.ReadOnlySQLTransaction:
		return driver.ReadOnly
	case pgerrcode.CannotConnectNow:
		// Only ever the answer to a connection's startup: the server
		// refuses the session while it starts, shuts down or recovers.
		return driver.ConnLost | driver.NotSent
	case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown:
		// The server ends the session as it shuts down (a failover's
		// old primary, a restart) or refuses it while starting or in
		// recovery: the connection is gone like a broken one, and a
		// COMMIT it answered may have committed (with synchronous
		// replication, "canceling the wait for synchronous replication
		// ... already committed locally").
		return driver.ConnLost
	}
	return 0
}

// isConnClosed reports whether err is pgconn's error for a statement on a
// closed connection. pgconn gives it, unexported and unwrapping nothing,
// for the results of a statement or batch read after the connection
// broke under them (the first read saw io.ErrUnexpectedEOF or a reset),
// and for a statement it did not send because the connection had broken
// before. A COMMIT that meets it may have committed: it counts as a lost
// connection.
func isConnClosed(err error) bool {
	t := reflect.TypeOf(err)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == pgconnPkg &&
		t.Elem().Name() == "connLockError" && err.Error() == "conn closed"
}

var pgconnPkg = reflect.TypeFor[pgconn.PgError]().PkgPath()

// uniqueViolation reports whether an error of err's tree is a unique
// violation on the named constraint. An empty constraint matches any.
func uniqueViolation(err error, constraint string) bool {
	return driver.Walk(err, func(e error) bool {
		pgErr, ok := e.(*pgconn.PgError)
		return ok && pgErr.Code == pgerrcode.UniqueViolation &&
			(constraint == "" || pgErr.ConstraintName == constraint)
	})
}

// lockElsewhere reports whether an error of err's tree is a lock wait that
// gave up (55P03, lock_timeout) on something other than a row. PostgreSQL
// names the row in the error's context when it waits for the transaction
// that holds it ("while inserting index tuple ..." for the claim's
// INSERT, "while updating tuple ..." for a takeover's UPDATE); the wait
// for a table's lock, or for the lock on growing the table's file, has
// none. So have two short waits on the key itself: for an INSERT of the
// same key at the instant it inserts (a speculative insertion), and for
// the place in the queue of a row's lock; the next attempt waits for the
// row's transaction, and names it. Only whether the context is empty is read: its words follow the
// server's lc_messages.
func lockElsewhere(err error) bool {
	return driver.Walk(err, func(e error) bool {
		pgErr, ok := e.(*pgconn.PgError)
		return ok && pgErr.Code == pgerrcode.LockNotAvailable && pgErr.Where == ""
	})
}
