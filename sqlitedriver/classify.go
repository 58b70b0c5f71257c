package sqlitedriver

import (
	"reflect"
	"strings"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Every program that links this package classifies the errors of the
// SQLite libraries it supports, from sqlonce and from its own queries
// alike (sqlonce.IsRetryable).
func init() { driver.Register(driver.ClassifierFunc(classify)) }

// The libraries whose errors are recognised, by the package path of their
// database/sql driver and error types. Recognised by reflection, not by
// importing them: the packages every SQLite user imports link neither.
const (
	pkgModernc = "modernc.org/sqlite"
	pkgMattn   = "github.com/mattn/go-sqlite3"
)

// SQLite result codes (https://www.sqlite.org/rescode.html). The low byte
// of an extended code is its primary code.
const (
	codeBusy      = 5
	codeLocked    = 6
	codeNoMem     = 7
	codeInterrupt = 9
	codeIOErr     = 10
	codeFull      = 13

	codeBusyTimeout          = codeBusy | 3<<8 // 773
	codeConstraintPrimaryKey = 19 | 6<<8       // 1555
	codeConstraintUnique     = 19 | 8<<8       // 2067
)

// code returns the extended result code of err alone, when err is the
// error type of a supported library: modernc.org/sqlite's *Error, whose
// Code method returns it (the library turns extended codes on), or
// mattn/go-sqlite3's Error, a struct whose ExtendedCode field holds it
// (the library turns them on too).
func code(err error) (int, bool) {
	t := reflect.TypeOf(err)
	if t == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if t.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		t, v = t.Elem(), v.Elem()
	}
	switch {
	case t.PkgPath() == pkgModernc:
		if c, ok := err.(interface{ Code() int }); ok {
			return c.Code(), true
		}
	case t.PkgPath() == pkgMattn && t.Name() == "Error" && t.Kind() == reflect.Struct:
		if f := v.FieldByName("ExtendedCode"); f.IsValid() && f.CanInt() {
			return int(f.Int()), true
		}
	}
	return 0, false
}

// classify reads one error of a tree.
//
// SQLITE_BUSY in all its forms is retryable (the write lock stayed taken
// for busy_timeout; SQLITE_BUSY_SNAPSHOT, a transaction that read an older
// snapshot than the database now has and tried to write), and so is
// SQLITE_LOCKED (a shared-cache table lock): rolled back and run again,
// the transaction gets the lock or a fresh snapshot. Only plain BUSY and
// BUSY_TIMEOUT are a lock wait that gave up: BUSY_SNAPSHOT is returned at
// once.
//
// After SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM and an interrupted write
// (a cancelled context) SQLite may have rolled the whole transaction back
// itself (https://www.sqlite.org/lang_transaction.html, "Response To
// Errors Within A Transaction"), and then runs the next statement in
// autocommit mode.
func classify(err error) driver.Class {
	c, ok := code(err)
	if !ok {
		return 0
	}
	var cl driver.Class
	switch c & 0xff {
	case codeBusy, codeLocked:
		cl |= driver.Retryable
	case codeFull, codeIOErr, codeNoMem, codeInterrupt:
		cl |= driver.TxRolledBack
	}
	if c == codeBusy || c == codeBusyTimeout {
		cl |= driver.LockNotAvailable
	}
	if c == codeConstraintUnique || c == codeConstraintPrimaryKey {
		cl |= driver.Unique
	}
	return cl
}

// duplicate is a unique or primary key violation in an error's tree.
// target is what SQLite names: SQLite keeps no constraint names, and its
// message names the columns, "UNIQUE constraint failed: orders.customer,
// orders.amount", or for an index on expressions the index, "UNIQUE
// constraint failed: index 'name'"; target is that text after the colon,
// or "" when the message has another form.
type duplicate struct {
	target  string
	primary bool
}

// duplicates returns the unique and primary key violations of err's tree.
func duplicates(err error) []duplicate {
	var ds []duplicate
	driver.Walk(err, func(e error) bool {
		if c, ok := code(e); ok && (c == codeConstraintUnique || c == codeConstraintPrimaryKey) {
			ds = append(ds, duplicate{target: uniqueTarget(e.Error()), primary: c == codeConstraintPrimaryKey})
		}
		return false
	})
	return ds
}

// firstDuplicate returns the first unique or primary key violation of
// err's tree.
func firstDuplicate(err error) (target string, primary, ok bool) {
	ds := duplicates(err)
	if len(ds) == 0 {
		return "", false, false
	}
	return ds[0].target, ds[0].primary, true
}

// uniqueTarget extracts the target from the library's message: SQLite's
// own, "UNIQUE constraint failed: t.a, t.b" (mattn/go-sqlite3), or
// wrapped, "constraint failed: UNIQUE constraint failed: t.a, t.b (2067)"
// (modernc.org/sqlite): the text after the marker, without a " (code)"
// suffix.
func uniqueTarget(msg string) string {
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
