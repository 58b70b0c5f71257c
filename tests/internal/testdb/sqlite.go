package testdb

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	// The database/sql driver "sqlite3" (cgo), for SQLiteMattn.
	_ "github.com/mattn/go-sqlite3"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
)

// SQLiteLib is a SQLite library sqlonce supports: its database/sql driver
// name and the DSN that configures a file as sqlonce needs.
type SQLiteLib struct {
	Name       string
	DriverName string
	DSN        func(path string) string
}

var (
	// Modernc is modernc.org/sqlite, pure Go.
	Modernc = SQLiteLib{Name: "modernc", DriverName: modernc.DriverName, DSN: modernc.DSN}
	// Mattn is github.com/mattn/go-sqlite3, cgo.
	Mattn = SQLiteLib{Name: "mattn", DriverName: mattn.DriverName, DSN: mattn.DSN}
)

// SQLite is a database file of its own, in the test's temporary directory,
// with the tables migrated. SQLite needs no server: it is never skipped.
type SQLite struct {
	// DB is opened with Lib's DSN (BEGIN IMMEDIATE, busy timeout, WAL,
	// foreign keys).
	DB *sql.DB
	// Path is the database file.
	Path string
	// DSN opens the same file with the same settings (driver
	// Lib.DriverName).
	DSN string
	Lib SQLiteLib
}

// EmptySQLite returns the path of a database file that does not exist yet,
// in a directory removed when t ends.
func EmptySQLite(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "test.db")
}

// NewSQLite creates a database file for t with modernc.org/sqlite and
// migrates it. maxConns bounds the pool (0: 8).
func NewSQLite(t testing.TB, maxConns int) *SQLite {
	t.Helper()
	return NewSQLiteWith(t, Modernc, maxConns)
}

// NewSQLiteWith is NewSQLite through the SQLite library lib.
func NewSQLiteWith(t testing.TB, lib SQLiteLib, maxConns int) *SQLite {
	t.Helper()
	path := EmptySQLite(t)
	dsn := lib.DSN(path)
	db, err := sql.Open(lib.DriverName, dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatalf("sqlonce migrations: %v", err)
	}
	if err := bizdb.Migrate(ctx, db, "sqlite"); err != nil {
		t.Fatal(err)
	}
	return &SQLite{DB: db, Path: path, DSN: dsn, Lib: lib}
}
