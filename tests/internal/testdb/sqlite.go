package testdb

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
)

// SQLite is a database file of its own, in the test's temporary directory,
// with the tables migrated. SQLite needs no server: it is never skipped.
type SQLite struct {
	// DB is opened with sqlitedriver.DSN (BEGIN IMMEDIATE, busy timeout,
	// WAL, foreign keys).
	DB *sql.DB
	// Path is the database file.
	Path string
	// DSN opens the same file with the same settings (driver "sqlite").
	DSN string
}

// EmptySQLite returns the path of a database file that does not exist yet,
// in a directory removed when t ends.
func EmptySQLite(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "test.db")
}

// NewSQLite creates a database file for t and migrates it. maxConns bounds
// the pool (0: 8).
func NewSQLite(t testing.TB, maxConns int) *SQLite {
	t.Helper()
	path := EmptySQLite(t)
	dsn := sqlitedriver.DSN(path)
	db, err := sql.Open(sqlitedriver.DriverName, dsn)
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
	return &SQLite{DB: db, Path: path, DSN: dsn}
}
