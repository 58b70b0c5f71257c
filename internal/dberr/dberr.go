// Package dberr classifies database errors from pgx, go-sql-driver/mysql
// and modernc.org/sqlite by their typed fields (pgconn.PgError.Code,
// mysql.MySQLError.Number, the SQLite result code), never by matching
// message text where a typed field exists.
package dberr

import (
	"database/sql"
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// MySQL/MariaDB server error numbers.
const (
	mysqlCheckRead       = 1020 // MariaDB: record changed since the snapshot
	mysqlDupEntry        = 1062
	mysqlLockWaitTimeout = 1205
	mysqlDeadlock        = 1213
	mysqlLockNowait      = 3572 // MySQL 8: NOWAIT could not lock
)

// Retryable reports whether err means "roll back and run the whole
// transaction again": a serialization failure, a deadlock or a lock wait
// timeout, on PostgreSQL or MySQL/MariaDB; SQLITE_BUSY or SQLITE_LOCKED on
// SQLite.
//
// MariaDB with innodb_snapshot_isolation=ON (the default from 11.6) refuses
// a write to a row that changed after the transaction's snapshot with 1020
// "Record has changed since last read": its form of PostgreSQL's 40001.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, pgerrcode.LockNotAvailable:
			return true
		}
		return false
	}
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		switch myErr.Number {
		case mysqlDeadlock, mysqlLockWaitTimeout, mysqlLockNowait, mysqlCheckRead:
			return true
		}
		return false
	}
	if code, ok := sqliteCode(err); ok {
		return sqliteRetryable(code)
	}
	return false
}

// TxMayBeGone reports whether err may mean that the server has rolled back
// the whole transaction: a MySQL/MariaDB deadlock (1213) always does, a lock
// wait timeout (1205) does on a server running with
// innodb_rollback_on_timeout=ON. MySQL then runs the next statement on that
// connection outside any transaction, in autocommit, so nothing but
// ROLLBACK may be sent on it. (PostgreSQL keeps an aborted transaction open
// and refuses further statements.)
//
// SQLite may roll the transaction back itself after SQLITE_FULL,
// SQLITE_IOERR, SQLITE_NOMEM and an interrupted write (a cancelled
// context), and then also runs the next statement in autocommit.
func TxMayBeGone(err error) bool {
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return myErr.Number == mysqlDeadlock || myErr.Number == mysqlLockWaitTimeout
	}
	code, ok := sqliteCode(err)
	return ok && sqliteTxRolledBack(code)
}

// LockNotAvailable reports whether err is a lock wait that gave up: a
// PostgreSQL lock_timeout/NOWAIT (55P03), a MySQL lock wait timeout, or
// SQLite's busy handler giving up after busy_timeout (SQLITE_BUSY).
func LockNotAvailable(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code == pgerrcode.LockNotAvailable
	}
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return myErr.Number == mysqlLockWaitTimeout || myErr.Number == mysqlLockNowait
	}
	if code, ok := sqliteCode(err); ok {
		return sqliteLockNotAvailable(code)
	}
	return false
}

// PgUniqueViolation reports whether err is a PostgreSQL unique violation on
// the named constraint. An empty constraint matches any.
func PgUniqueViolation(err error, constraint string) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pgErr.Code != pgerrcode.UniqueViolation {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}

// MySQLDuplicate reports whether err is a MySQL/MariaDB duplicate-key error
// (1062) on the named key. An empty key matches any.
//
// MySQLError has no field naming the key, so the name is read from the
// server's message, whose format is fixed by the server:
// "Duplicate entry '<value>' for key '<name>'". MySQL 8.0.19+ writes the key
// as '<table>.<name>'; MariaDB writes '<name>'. Both are accepted. Index
// names compare without regard to case, as MySQL compares them. The message
// is in the server's lc_messages language: in any language but English the
// name cannot be found and no duplicate matches a named key.
//
// MariaDB does not name the table: a key of the same name on another table
// written by the same statements matches as well.
func MySQLDuplicate(err error, key string) bool {
	myErr, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok || myErr.Number != mysqlDupEntry {
		return false
	}
	if key == "" {
		return true
	}
	name := mysqlDuplicateKeyName(myErr.Message)
	if strings.EqualFold(name, key) {
		return true
	}
	// '<table>.<name>'. A quoted index name may itself contain a dot, so
	// the table is not cut off at the first or last dot: the name must end
	// the message's key after a dot.
	return len(name) > len(key) && name[len(name)-len(key)-1] == '.' &&
		strings.EqualFold(name[len(name)-len(key):], key)
}

// mysqlDuplicateKeyName extracts the key name from a 1062 message, as the
// server wrote it (MySQL 8 qualifies it with the table). The value quoted
// before it may itself contain "for key '", so the last occurrence is the
// one the server appended.
func mysqlDuplicateKeyName(msg string) string {
	const marker = " for key '"
	i := strings.LastIndex(msg, marker)
	if i < 0 || !strings.HasSuffix(msg, "'") || i+len(marker) > len(msg)-1 {
		return ""
	}
	return msg[i+len(marker) : len(msg)-1]
}

// TxDone reports whether err is a statement refused because its
// transaction had already been committed or rolled back: database/sql's
// sql.ErrTxDone, pgx's pgx.ErrTxClosed.
func TxDone(err error) bool {
	return errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxClosed)
}
