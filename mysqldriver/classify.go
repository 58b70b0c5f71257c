package mysqldriver

import (
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Every program that links this package classifies go-sql-driver/mysql's
// errors, from sqlonce and from its own queries alike
// (sqlonce.IsRetryable).
func init() { driver.Register(driver.ClassifierFunc(classify)) }

// MySQL/MariaDB server error numbers.
const (
	errCheckRead       = 1020 // MariaDB: record changed since the snapshot
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
	errLockNowait      = 3572 // MySQL 8: NOWAIT could not lock
	// The server refuses writes: ER_OPTION_PREVENTS_STATEMENT, which
	// read_only gives (sqlonce's statements meet no other option that
	// gives it), ER_READ_ONLY_MODE and
	// ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION.
	errOptionPrevents = 1290
	errReadOnlyMode   = 1836
	errReadOnlyTx     = 1792
	// The server is shutting down or killed the session
	// (ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED): the connection is
	// gone like a broken one.
	errServerShutdown   = 1053
	errConnectionKilled = 1927
	// Through vtgate (Vitess): ER_QUERY_INTERRUPTED, what vtgate answers
	// for its ABORTED, CANCELED and DEADLINE_EXCEEDED (see vtgate.go), and
	// ER_UNKNOWN_ERROR, for the rest of its own errors (a shard without a
	// serving tablet).
	errQueryInterrupted = 1317
	errUnknown          = 1105
	errSpNotExist       = 1305 // ER_SP_DOES_NOT_EXIST: "SAVEPOINT %s does not exist" too
	// The client's "server has gone away" and "lost connection", which
	// vtgate passes on from a tablet whose MySQL connection died.
	crServerGone = 2006
	crServerLost = 2013
)

// classify reads one error of a tree: a *mysql.MySQLError by its number,
// mysql.ErrInvalidConn (the connection broke, after or while sending).
//
// MariaDB with innodb_snapshot_isolation=ON (the default from 11.6)
// refuses a write to a row that changed after the transaction's snapshot
// with 1020 "Record has changed since last read": its form of
// PostgreSQL's 40001.
//
// A deadlock (1213) always rolls the whole transaction back; a lock wait
// timeout (1205) does on a server running with
// innodb_rollback_on_timeout=ON. MySQL then runs the next statement on
// that connection outside any transaction, in autocommit.
func classify(err error) driver.Class {
	switch err {
	case mysql.ErrInvalidConn:
		return driver.ConnLost
	case errVtgateClaimGone, errVtgateTxGone:
		return driver.TxRolledBack // as vtgate's 1317 refusal
	}
	myErr, ok := err.(*mysql.MySQLError)
	if !ok {
		return 0
	}
	switch myErr.Number {
	case errDeadlock:
		return driver.Retryable | driver.TxRolledBack
	case errLockWaitTimeout:
		return driver.Retryable | driver.LockNotAvailable | driver.TxRolledBack
	case errLockNowait:
		return driver.Retryable | driver.LockNotAvailable
	case errCheckRead:
		return driver.Retryable
	case errDupEntry:
		return driver.Unique
	case errOptionPrevents, errReadOnlyMode, errReadOnlyTx:
		return driver.ReadOnly
	case errServerShutdown, errConnectionKilled:
		return driver.ConnLost
	case errQueryInterrupted, errUnknown, errSpNotExist, crServerGone, crServerLost:
		return classifyVtgate(myErr)
	}
	return 0
}

// duplicate reports whether an error of err's tree is a duplicate-key
// error (1062) on the named key. An empty key matches any.
//
// MySQLError has no field naming the key, so the name is read from the
// server's message, whose format is fixed by the server:
// "Duplicate entry '<value>' for key '<name>'". MySQL 8.0.19+ writes the
// key as '<table>.<name>'; MariaDB writes '<name>'. Both are accepted.
// Index names compare without regard to case, as MySQL compares them. The
// message is in the server's lc_messages language: in any language but
// English the name cannot be found and no duplicate matches a named key.
//
// MariaDB does not name the table: a key of the same name on another table
// written by the same statements matches as well.
func duplicate(err error, key string) bool {
	return driver.Walk(err, func(e error) bool {
		myErr, ok := e.(*mysql.MySQLError)
		return ok && myErr.Number == errDupEntry && duplicateOn(myErr.Message, key)
	})
}

func duplicateOn(msg, key string) bool {
	if key == "" {
		return true
	}
	name := duplicateKeyName(msg)
	if strings.EqualFold(name, key) {
		return true
	}
	// '<table>.<name>'. A quoted index name may itself contain a dot, so
	// the table is not cut off at the first or last dot: the name must end
	// the message's key after a dot.
	return len(name) > len(key) && name[len(name)-len(key)-1] == '.' &&
		strings.EqualFold(name[len(name)-len(key):], key)
}

// duplicateKeyName extracts the key name from a 1062 message, as the
// server wrote it (MySQL 8 qualifies it with the table). The value quoted
// before it may itself contain "for key '", so the last occurrence is the
// one the server appended.
func duplicateKeyName(msg string) string {
	if name, ok := vtgateDuplicateKeyName(msg); ok {
		return name
	}
	const marker = " for key '"
	i := strings.LastIndex(msg, marker)
	if i < 0 || !strings.HasSuffix(msg, "'") || i+len(marker) > len(msg)-1 {
		return ""
	}
	return msg[i+len(marker) : len(msg)-1]
}
