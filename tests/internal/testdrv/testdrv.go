// Package testdrv builds sqlonce's drivers for tests: each function calls
// the driver's New and fails the test on its error, so that a test reads
// as the one-line construction it was before New returned one.
package testdrv

import (
	"database/sql"
	"testing"

	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// Pgx returns pgxdriver.New(db, opts...), failing t on its error.
func Pgx(t testing.TB, db pgxdriver.Beginner, opts ...pgxdriver.Option) *pgxdriver.Driver {
	t.Helper()
	d, err := pgxdriver.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PgSQL returns pgsqldriver.New(db, opts...), failing t on its error.
func PgSQL(t testing.TB, db *sql.DB, opts ...pgsqldriver.Option) *pgsqldriver.Driver {
	t.Helper()
	d, err := pgsqldriver.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// MySQL returns mysqldriver.New(db, opts...), failing t on its error.
func MySQL(t testing.TB, db *sql.DB, opts ...mysqldriver.Option) *mysqldriver.Driver {
	t.Helper()
	d, err := mysqldriver.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
