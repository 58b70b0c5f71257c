package dberr

import (
	"errors"
	"strings"
)

// sqliteCoder is implemented by modernc.org/sqlite's *Error, whose Code is
// SQLite's extended result code (the driver turns extended codes on). It
// is matched by method, not by type, so that the packages every user
// imports do not link the SQLite library.
type sqliteCoder interface {
	error
	Code() int
}

// SQLite result codes (https://www.sqlite.org/rescode.html). The low byte
// of an extended code is its primary code.
const (
	sqliteBusy      = 5
	sqliteLocked    = 6
	sqliteNoMem     = 7
	sqliteInterrupt = 9
	sqliteIOErr     = 10
	sqliteFull      = 13

	sqliteBusyTimeout          = sqliteBusy | 3<<8 // 773
	sqliteConstraintPrimaryKey = 19 | 6<<8         // 1555
	sqliteConstraintUnique     = 19 | 8<<8         // 2067
)

func sqliteCode(err error) (int, bool) {
	e, ok := errors.AsType[sqliteCoder](err)
	if !ok {
		return 0, false
	}
	return e.Code(), true
}

// sqliteRetryable: SQLITE_BUSY in all its forms (the write lock stayed
// taken for busy_timeout; SQLITE_BUSY_SNAPSHOT, a transaction that read an
// older snapshot than the database now has and tried to write) and
// SQLITE_LOCKED (a shared-cache table lock). Rolled back and run again,
// the transaction gets the lock or a fresh snapshot.
func sqliteRetryable(code int) bool {
	switch code & 0xff {
	case sqliteBusy, sqliteLocked:
		return true
	}
	return false
}

// sqliteLockNotAvailable: the busy handler waited busy_timeout for the
// write lock and gave up. SQLITE_BUSY_SNAPSHOT is not a wait: it is
// returned at once and only a new transaction can resolve it.
func sqliteLockNotAvailable(code int) bool {
	return code == sqliteBusy || code == sqliteBusyTimeout
}

// sqliteTxRolledBack: errors after which SQLite may have rolled back the
// whole transaction itself (https://www.sqlite.org/lang_transaction.html,
// "Response To Errors Within A Transaction"; an interrupted write always
// rolls it back). The next statement on the connection would then run in
// autocommit mode.
func sqliteTxRolledBack(code int) bool {
	switch code & 0xff {
	case sqliteFull, sqliteIOErr, sqliteNoMem, sqliteInterrupt:
		return true
	}
	return false
}

// SQLiteUnique reports whether err is a SQLite unique or primary key
// violation, whether on the primary key, and what SQLite names as its
// target.
//
// SQLite keeps no constraint names: the message names the columns,
// "UNIQUE constraint failed: orders.customer, orders.amount", or for an
// index on expressions the index, "UNIQUE constraint failed: index 'name'".
// target is that text after the colon ("orders.customer, orders.amount",
// "index 'name'"), or "" when the message has another form.
func SQLiteUnique(err error) (target string, primary, ok bool) {
	code, isSQLite := sqliteCode(err)
	if !isSQLite || (code != sqliteConstraintUnique && code != sqliteConstraintPrimaryKey) {
		return "", false, false
	}
	return sqliteUniqueTarget(err.Error()), code == sqliteConstraintPrimaryKey, true
}

// sqliteUniqueTarget extracts the target from modernc.org/sqlite's message,
// "constraint failed: UNIQUE constraint failed: t.a, t.b (2067)": SQLite's
// own message after the marker, without the driver's " (code)" suffix.
func sqliteUniqueTarget(msg string) string {
	const marker = "UNIQUE constraint failed: "
	i := strings.LastIndex(msg, marker)
	if i < 0 {
		return ""
	}
	s := msg[i+len(marker):]
	if j := strings.LastIndex(s, " ("); j >= 0 && strings.HasSuffix(s, ")") && allDigits(s[j+2:len(s)-1]) {
		s = s[:j]
	}
	return s
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
