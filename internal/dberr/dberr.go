// Package dberr classifies database errors from pgx and go-sql-driver/mysql
// by their typed fields (pgconn.PgError.Code, mysql.MySQLError.Number),
// never by matching message text where a typed field exists.
package dberr

import (
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// MySQL/MariaDB server error numbers.
const (
	mysqlDupEntry        = 1062
	mysqlLockWaitTimeout = 1205
	mysqlDeadlock        = 1213
	mysqlLockNowait      = 3572 // MySQL 8: NOWAIT could not lock
)

// Retryable reports whether err means "roll back and run the whole
// transaction again": a serialization failure, a deadlock or a lock wait
// timeout, on PostgreSQL or MySQL/MariaDB.
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
		case mysqlDeadlock, mysqlLockWaitTimeout, mysqlLockNowait:
			return true
		}
		return false
	}
	return false
}

// LockNotAvailable reports whether err is a lock wait that gave up: a
// PostgreSQL lock_timeout/NOWAIT (55P03) or a MySQL lock wait timeout.
func LockNotAvailable(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code == pgerrcode.LockNotAvailable
	}
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return myErr.Number == mysqlLockWaitTimeout || myErr.Number == mysqlLockNowait
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
// as '<table>.<name>'; MariaDB writes '<name>'. Both are accepted.
func MySQLDuplicate(err error, key string) bool {
	myErr, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok || myErr.Number != mysqlDupEntry {
		return false
	}
	if key == "" {
		return true
	}
	return mysqlDuplicateKeyName(myErr.Message) == key
}

// mysqlDuplicateKeyName extracts the key name from a 1062 message. The value
// quoted before it may itself contain "for key '", so the last occurrence
// is the one the server appended.
func mysqlDuplicateKeyName(msg string) string {
	const marker = " for key '"
	i := strings.LastIndex(msg, marker)
	if i < 0 || !strings.HasSuffix(msg, "'") {
		return ""
	}
	name := msg[i+len(marker) : len(msg)-1]
	// MySQL 8 qualifies the key with its table; an index name cannot contain
	// a dot unless quoted, and sqlonce compares against the bare name.
	if j := strings.LastIndexByte(name, '.'); j >= 0 {
		name = name[j+1:]
	}
	return name
}
