package migrations

import (
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// NewSchemaProvider is NewProvider for sqlonce's tables in the named
// PostgreSQL schema or MySQL/MariaDB database, as Up puts them there with
// WithSchema: every migration, and the version table, names its tables
// qualified. It does not create the schema (Up does): its Up fails while
// the schema is missing. A name WithSchema refuses, SQLite (which has no
// schemas), and NewProvider's refusals are errors matching
// sqlonce.ErrInvalidArgument, before any SQL runs.
func NewSchemaProvider(d Dialect, db *sql.DB, schema string, opts ...goose.ProviderOption) (*goose.Provider, error) {
	if err := checkHandle(db, d); err != nil {
		return nil, err
	}
	dialect := driver.Postgres
	switch d {
	case Postgres:
	case MySQL:
		dialect = driver.MySQL
	default:
		return nil, fmt.Errorf("%w: sqlonce/migrations: dialect %q has no schemas", sqlonce.ErrInvalidArgument, d)
	}
	s, err := driver.NewSchema(dialect, schema)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlonce/migrations: %v", sqlonce.ErrInvalidArgument, err)
	}
	var locker *mysqlLocker
	if d == MySQL {
		locker = &mysqlLocker{database: s.Name()}
	}
	return newProvider(d, db, s, locker, opts...)
}
