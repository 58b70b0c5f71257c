package driver

import (
	"database/sql"
	"fmt"
	"reflect"
	"strings"
)

// Dialects of SQLDialect.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
	SQLite   = "sqlite"
)

// sqlLibraries maps the package of a database/sql driver's type to the
// database it speaks. Read by reflection, so that no library is linked to
// recognise it.
var sqlLibraries = map[string]string{
	"github.com/jackc/pgx/v5/stdlib":       Postgres,
	"github.com/jackc/pgx/v4/stdlib":       Postgres,
	"github.com/lib/pq":                    Postgres,
	"github.com/go-sql-driver/mysql":       MySQL,
	"modernc.org/sqlite":                   SQLite,
	"github.com/mattn/go-sqlite3":          SQLite,
	"github.com/ncruces/go-sqlite3/driver": SQLite,
	"github.com/glebarez/go-sqlite":        SQLite,
}

// dialectNames are the dialects as error messages name them.
var dialectNames = map[string]string{Postgres: "PostgreSQL", MySQL: "MySQL/MariaDB", SQLite: "SQLite"}

// SQLDialect names the database that db's database/sql driver speaks,
// from the package of db.Driver()'s type, and that package: dialect is
// Postgres, MySQL or SQLite, or "" for a driver it does not know (another
// library, or a wrapper such as otelsql).
func SQLDialect(db *sql.DB) (dialect, pkg string) {
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "", ""
	}
	pkg = t.PkgPath()
	if d, ok := sqlLibraries[pkg]; ok {
		return d, pkg
	}
	// Internal packages of a library (".../internal/...").
	for p, d := range sqlLibraries {
		if strings.HasPrefix(pkg, p+"/") {
			return d, pkg
		}
	}
	return "", pkg
}

// sqlonceDrivers names, per dialect, the sqlonce driver a message
// suggests for a handle of that database.
var sqlonceDrivers = map[string]string{
	Postgres: "pgsqldriver (or pgxdriver with a pgx pool)",
	MySQL:    "mysqldriver",
	SQLite:   "sqlitedriver",
}

// DriverFor names the sqlonce driver for dialect, as a message suggests
// it ("mysqldriver"); "" for a dialect it does not know.
func DriverFor(dialect string) string { return sqlonceDrivers[dialect] }

// WrongHandle returns the error for a handle of another database given to
// the driver named name (its package) of dialect want: db's database/sql
// driver is known (SQLDialect) and speaks another dialect. It names the
// handle's library and the sqlonce driver to use, and wraps invalid
// (sqlonce.ErrInvalidArgument, which this package cannot import). It is
// nil when db's library speaks want or is unknown (a wrapper such as
// otelsql), and for a nil db.
func WrongHandle(db *sql.DB, want, name string, invalid error) error {
	if db == nil {
		return nil
	}
	got, pkg := SQLDialect(db)
	if got == "" || got == want {
		return nil
	}
	return fmt.Errorf("%w: %s: given a *sql.DB of %s (%s), not %s; use %s",
		invalid, name, DialectName(got), pkg, DialectName(want), DriverFor(got))
}

// DialectName is dialect as a message names it ("PostgreSQL").
func DialectName(dialect string) string {
	if n, ok := dialectNames[dialect]; ok {
		return n
	}
	return dialect
}
