package sqlitedriver_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	// A database/sql driver that is not a SQLite library.
	_ "github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// New accepts a database of a SQLite library it recognises, and refuses
// any other database/sql driver's, saying which libraries it supports,
// rather than misread its errors. (mattn/go-sqlite3, a wrapping driver,
// and real PostgreSQL and MariaDB servers are checked in the tests
// module.)
func TestNewLibrary(t *testing.T) {
	db, err := modernc.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitedriver.New(db); err != nil {
		t.Fatalf("modernc.org/sqlite: %v", err)
	}
	if d, err := sqlitedriver.New(nil); !errors.Is(err, sqlonce.ErrInvalidArgument) || d != nil {
		t.Fatalf("New(nil) = %v, %v; want ErrInvalidArgument", d, err)
	}

	// A database of another database's known database/sql driver is
	// refused by its type, without a round trip (the server cannot be
	// reached), naming the sqlonce driver to use.
	other, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	d, err := sqlitedriver.New(other)
	if !errors.Is(err, sqlonce.ErrInvalidArgument) || d != nil {
		t.Fatalf("New on go-sql-driver/mysql = %v, %v; want ErrInvalidArgument", d, err)
	}
	for _, want := range []string{"github.com/go-sql-driver/mysql", "use mysqldriver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
}

// New refuses a handle opened without modernc.DSN, whose connections have
// no busy timeout, and one whose transactions begin DEFERRED, naming the
// functions that open it right. (Both libraries, and the race that shows
// why, are in the tests module's sqlitelib.)
func TestNewRefusesUnconfigured(t *testing.T) {
	for name, suffix := range map[string]string{
		"plain":             "",
		"deferred":          "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)",
		"no busy timeout":   "?_txlock=immediate",
		"explicit deferred": "?_txlock=deferred&_pragma=busy_timeout(10000)",
	} {
		db, err := sql.Open(modernc.DriverName, filepath.Join(t.TempDir(), "t.db")+suffix)
		if err != nil {
			t.Fatal(err)
		}
		d, err := sqlitedriver.New(db)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || d != nil || !strings.Contains(err.Error(), "modernc.Open") {
			t.Errorf("%s: New = %v, %v; want ErrInvalidArgument naming modernc.Open", name, d, err)
		}
		db.Close()
	}
	db, err := sql.Open(modernc.DriverName, modernc.DSN(filepath.Join(t.TempDir(), "t.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitedriver.New(db); err != nil {
		t.Fatalf("modernc.DSN: %v", err)
	}
}
