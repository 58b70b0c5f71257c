package driver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	// The libraries SQLDialect knows by their type, opened on servers
	// that are never reached: the check needs no connection.
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

var errInvalid = errors.New("invalid argument")

// wrapper stands for a database/sql driver SQLDialect does not know (a
// tracing wrapper).
type wrapper struct{}

func (wrapper) Open(string) (driver.Conn, error) { return nil, errors.New("not connected") }

func TestCheckSQLDialect(t *testing.T) {
	open := func(name, dsn string) *sql.DB {
		t.Helper()
		db, err := sql.Open(name, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	handles := map[string]*sql.DB{
		Postgres: open("pgx", "postgres://x@127.0.0.1:1/none"),
		MySQL:    open("mysql", "x@tcp(127.0.0.1:1)/none"),
		SQLite:   open("sqlite", "file:none?mode=memory"),
	}
	uses := map[string]string{Postgres: "use pgsqldriver (or pgxdriver", MySQL: "use mysqldriver", SQLite: "use sqlitedriver"}
	for want := range handles {
		for got, db := range handles {
			check, err := CheckSQLDialect(db, want, "xdriver", errInvalid)
			if got == want {
				if err != nil || check != nil {
					t.Errorf("%s handle for %s: %v, %v; want nothing to check", got, want, check, err)
				}
				continue
			}
			if !errors.Is(err, errInvalid) || check != nil {
				t.Fatalf("%s handle for %s: %v, %v; want the invalid error", got, want, check, err)
			}
			for _, s := range []string{"xdriver", DialectName(got), uses[got]} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s handle for %s: %q does not name %q", got, want, err, s)
				}
			}
		}
	}
	if _, err := CheckSQLDialect(nil, Postgres, "xdriver", errInvalid); !errors.Is(err, errInvalid) {
		t.Errorf("nil handle: %v, want the invalid error", err)
	}
	// An unknown database/sql driver passes to the first call's probe.
	db := sql.OpenDB(connector{})
	defer db.Close()
	check, err := CheckSQLDialect(db, MySQL, "xdriver", errInvalid)
	if err != nil || check == nil {
		t.Errorf("unknown driver: %v, %v; want a check for the first call", check, err)
	}
	if err := WrongHandle(db, MySQL, "xdriver", errInvalid); err != nil {
		t.Errorf("WrongHandle on an unknown driver: %v", err)
	}
}

type connector struct{}

func (connector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("not connected")
}
func (connector) Driver() driver.Driver { return wrapper{} }
