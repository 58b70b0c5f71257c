package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/sqlonce/sqlonce/internal/driver"
)

func has(err error, c driver.Class) bool { return driver.Classify(err).Has(c) }

func Retryable(err error) bool        { return has(err, driver.Retryable) }
func LockNotAvailable(err error) bool { return has(err, driver.LockNotAvailable) }
func TxMayBeGone(err error) bool      { return has(err, driver.TxRolledBack) }

// openSQLite opens a database file of its own for t, with a busy timeout
// of busyMS and transactions that begin as txlock says.
func openSQLite(t *testing.T, path, txlock string, busyMS int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", fmt.Sprintf("%s?_txlock=%s&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)", path, txlock, busyMS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The classification is checked on errors a real SQLite returns, so that a
// change in modernc.org/sqlite's messages or codes shows here. The tests
// module checks mattn/go-sqlite3's the same way.
func TestSQLiteErrors(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	db := openSQLite(t, path, "immediate", 50)
	for _, q := range []string{
		"CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b INTEGER, c TEXT)",
		"CREATE UNIQUE INDEX t_ab ON t (a, b)",
		"CREATE UNIQUE INDEX t_lower_c ON t (lower(c))",
		"CREATE TABLE k (x TEXT, y TEXT, PRIMARY KEY (x, y)) WITHOUT ROWID",
		"INSERT INTO t VALUES (1, 'a', 1, 'C')",
		"INSERT INTO k VALUES ('x', 'y')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	for _, tc := range []struct {
		q       string
		target  string
		primary bool
	}{
		{"INSERT INTO t VALUES (2, 'a', 1, 'x')", "t.a, t.b", false},
		{"INSERT INTO t VALUES (1, 'z', 9, 'y')", "t.id", true},
		{"INSERT INTO t VALUES (3, 'q', 3, 'c')", "index 't_lower_c'", false},
		{"INSERT INTO k VALUES ('x', 'y')", "k.x, k.y", true},
	} {
		_, err := db.ExecContext(ctx, tc.q)
		target, primary, ok := firstDuplicate(err)
		if !ok || target != tc.target || primary != tc.primary {
			t.Errorf("%s: %v: got %q primary=%v ok=%v, want %q primary=%v", tc.q, err, target, primary, ok, tc.target, tc.primary)
		}
		if Retryable(err) || LockNotAvailable(err) || TxMayBeGone(err) {
			t.Errorf("%s: a duplicate classified as retryable, lock wait or rolled back: %v", tc.q, err)
		}
	}
	for _, q := range []string{
		"INSERT INTO t VALUES (4, NULL, NULL, NULL), (5, NULL, NULL, NULL)", // NULLs never collide
		"INSERT INTO nope VALUES (1)",
	} {
		_, err := db.ExecContext(ctx, q)
		if _, _, ok := firstDuplicate(err); ok {
			t.Errorf("%s: %v taken for a duplicate", q, err)
		}
	}

	t.Run("BusyAtBegin", func(t *testing.T) {
		holder, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		other := openSQLite(t, path, "immediate", 50)
		_, err = other.BeginTx(ctx, nil)
		if err == nil {
			t.Fatal("a second BEGIN IMMEDIATE got the write lock")
		}
		if !Retryable(err) || !LockNotAvailable(err) || TxMayBeGone(err) {
			t.Errorf("%v: retryable=%v lock wait=%v rolled back=%v, want true, true, false", err, Retryable(err), LockNotAvailable(err), TxMayBeGone(err))
		}
	})

	t.Run("BusySnapshot", func(t *testing.T) {
		// A deferred transaction reads, another commits, the first writes.
		deferred := openSQLite(t, path, "deferred", 50)
		tx, err := deferred.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (10, 'b', 1, 'b')"); err != nil {
			t.Fatal(err)
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (11, 'b', 2, 'bb')")
		if err == nil {
			t.Fatal("a write on a stale snapshot went through")
		}
		if !Retryable(err) || LockNotAvailable(err) {
			t.Errorf("%v: retryable=%v lock wait=%v, want true, false (it did not wait)", err, Retryable(err), LockNotAvailable(err))
		}
	})

	if Retryable(errors.New("busy")) || LockNotAvailable(fmt.Errorf("wrapped: %w", errors.New("x"))) {
		t.Error("a plain error classified as SQLite's")
	}
}
