package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
//
// The file is a copy of a template lib migrated once per test process:
// migrating each case's file anew took ~12% of the conformance suite's
// CPU in goose alone (its parser clears a 4 MiB buffer per line of a
// migration when its pool is empty), for a file that comes out the same
// every time.
func NewSQLiteWith(t testing.TB, lib SQLiteLib, maxConns int) *SQLite {
	t.Helper()
	path := EmptySQLite(t)
	tmpl, err := sqliteTemplate(lib)
	if err != nil {
		t.Fatalf("sqlite template: %v", err)
	}
	if err := os.WriteFile(path, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
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
	return &SQLite{DB: db, Path: path, DSN: dsn, Lib: lib}
}

var templates struct {
	sync.Mutex
	files map[string][]byte // by library name
}

// sqliteTemplate returns the bytes of a database file lib created and
// migrated (sqlonce's tables and the business tables), made on first use.
// The file is closed before it is read: the WAL is checkpointed into it
// and removed, and the file says WAL mode in its header.
func sqliteTemplate(lib SQLiteLib) ([]byte, error) {
	templates.Lock()
	defer templates.Unlock()
	if b, ok := templates.files[lib.Name]; ok {
		return b, nil
	}
	dir, err := os.MkdirTemp("", "sqlonce-sqlite-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "template.db")
	db, err := sql.Open(lib.DriverName, lib.DSN(path))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	err = migrations.Up(ctx, db, migrations.SQLite)
	if err == nil {
		err = bizdb.Migrate(ctx, db, "sqlite")
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		return nil, fmt.Errorf("%s-wal is still there after close", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if templates.files == nil {
		templates.files = map[string][]byte{}
	}
	templates.files[lib.Name] = b
	return b, nil
}
