package sqlitelib

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

func openMattn(t *testing.T, path, txlock string, busyMS int) *sql.DB {
	t.Helper()
	db, err := sql.Open(mattn.DriverName, fmt.Sprintf("%s?_txlock=%s&_busy_timeout=%d&_journal_mode=WAL", path, txlock, busyMS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The errors a real SQLite returns through mattn/go-sqlite3, whose error
// type is a struct with code fields (modernc.org/sqlite's has a Code
// method): a duplicate is recognised on the index the caller names, a busy
// database is retryable.
func TestMattnErrors(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	db := openMattn(t, path, "immediate", 50)
	for _, q := range []string{
		"CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b INTEGER, c TEXT)",
		"CREATE UNIQUE INDEX t_ab ON t (a, b)",
		"CREATE UNIQUE INDEX t_lower_c ON t (lower(c))",
		"INSERT INTO t VALUES (1, 'a', 1, 'C')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	drv, err := sqlitedriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	e := drv.Engine()
	for _, tc := range []struct {
		q          string
		constraint string
	}{
		{"INSERT INTO t VALUES (2, 'a', 1, 'x')", "t.a, t.b"},
		{"INSERT INTO t VALUES (1, 'z', 9, 'y')", "PRIMARY"},
		{"INSERT INTO t VALUES (3, 'q', 3, 'c')", "t_lower_c"},
	} {
		_, err := db.ExecContext(ctx, tc.q)
		c := driver.Classify(err)
		if !c.Has(driver.Unique) || c.Has(driver.Retryable|driver.LockNotAvailable|driver.TxRolledBack) {
			t.Errorf("%s: %v: class %b, want unique only", tc.q, err, c)
		}
		if !e.IsDuplicate(fmt.Errorf("insert: %w", err), tc.constraint) {
			t.Errorf("%s: %v not a duplicate on %s", tc.q, err, tc.constraint)
		}
		if e.IsDuplicate(err, "t_other") {
			t.Errorf("%s: %v a duplicate on t_other", tc.q, err)
		}
	}
	// The index named by the caller, looked up in the schema.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (2, 'a', 1, 'x')")
	if dup, lErr := e.Capabilities().DuplicateInTx.IsDuplicateInTx(ctx, tx, err, "t_ab"); !dup || lErr != nil {
		t.Errorf("%v: not a duplicate on t_ab", err)
	}
	_ = tx.Rollback()

	t.Run("BusyAtBegin", func(t *testing.T) {
		holder, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		other := openMattn(t, path, "immediate", 50)
		_, err = other.BeginTx(ctx, nil)
		if err == nil {
			t.Fatal("a second BEGIN IMMEDIATE got the write lock")
		}
		c := driver.Classify(err)
		if !sqlonce.IsRetryable(err) || !c.Has(driver.LockNotAvailable) || c.Has(driver.TxRolledBack) {
			t.Errorf("%v: class %b, want retryable and lock not available", err, c)
		}
	})

	t.Run("BusySnapshot", func(t *testing.T) {
		deferred := openMattn(t, path, "deferred", 50)
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
		if c := driver.Classify(err); !sqlonce.IsRetryable(err) || c.Has(driver.LockNotAvailable) {
			t.Errorf("%v: class %b, want retryable, not a lock wait (it did not wait)", err, c)
		}
	})
}

// mattn.Open refuses what cannot be a shared database file, and what it
// opens has the settings sqlitedriver documents on every pooled
// connection.
func TestMattnOpen(t *testing.T) {
	for _, bad := range []string{"", ":memory:", "file:x.db?mode=memory", "a?b.db"} {
		if db, err := mattn.Open(bad); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	db, err := mattn.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != sqlitedriver.MaxOpenConns {
		t.Errorf("pool of %d connections, want %d", got, sqlitedriver.MaxOpenConns)
	}
	ctx := context.Background()
	for i := range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mode string
		var busy, fk int64
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || time.Duration(busy)*time.Millisecond != sqlitedriver.BusyTimeout || fk != 1 {
			t.Errorf("connection %d: journal_mode %s, busy_timeout %dms, foreign_keys %d", i, mode, busy, fk)
		}
	}
	// BEGIN IMMEDIATE: a second writer waits at BEGIN.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if tx2, err := db.BeginTx(short, nil); err == nil {
		tx2.Rollback()
		t.Error("a second transaction began while the first held the write lock: not BEGIN IMMEDIATE")
	}
	if d, err := sqlitedriver.New(db); err != nil || d == nil {
		t.Fatalf("New on mattn/go-sqlite3: %v", err)
	}
}

// New refuses a *sql.DB of another database, naming its library and the
// sqlonce driver to use, before any call could misread that database's
// errors.
func TestNewRefusesServers(t *testing.T) {
	pg := testdb.NewPostgres(t, 2)
	pgDB := stdlib.OpenDBFromPool(pg.Pool)
	defer pgDB.Close()
	my := testdb.NewMySQL(t, 2)
	for name, c := range map[string]struct {
		db    *sql.DB
		names []string
	}{
		"PostgreSQL (pgx stdlib)": {pgDB, []string{"github.com/jackc/pgx/v5/stdlib", "use pgsqldriver (or pgxdriver"}},
		"MariaDB":                 {my.DB, []string{"github.com/go-sql-driver/mysql", "use mysqldriver"}},
	} {
		d, err := sqlitedriver.New(c.db)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || d != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidArgument", name, d, err)
			continue
		}
		for _, want := range c.names {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %q", name, err, want)
			}
		}
		t.Logf("%s: %v", name, err)
	}
}
