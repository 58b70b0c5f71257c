// Package migrations holds sqlonce's schema as goose SQL migrations, one
// folder per dialect, embedded in the binary.
//
// Run them from code with [Up] (or [NewProvider] for status and down); they
// record their version in their own table, [TableName], so they never touch
// the application's goose_db_version. Or point your own goose at the folder:
//
//	goose -dir migrations/postgres -table sqlonce_goose_db_version postgres "$DSN" up
//	goose -dir migrations/mysql    -table sqlonce_goose_db_version mysql    "$DSN" up
//	goose -dir migrations/sqlite   -table sqlonce_goose_db_version sqlite3  ./app.db up
//
// sqlc reads the same files as its schema, so the generated queries always
// match the tables.
//
// # Concurrent runs and poolers
//
// On PostgreSQL, Up takes an advisory lock so that instances starting at
// once run the migrations one after another. The lock is taken by a
// transaction of its own (pg_advisory_xact_lock) on a second connection of
// db and held until the migrations end, which works through a pooler in
// transaction mode (PgBouncer): a session lock would be released by a
// statement the pooler may send to another server connection, and stay
// held. With db.SetMaxOpenConns(1) there is no second connection, and Up
// falls back to goose's session lock: run it directly against PostgreSQL
// then, not through a transaction pooler. A handle whose limit database/sql
// cannot see (stdlib.OpenDBFromPool on a pgx pool of one connection) that
// gives no second connection within 2 s runs the migrations without the
// lock: concurrent runs then race on the version table, and all but one
// fail.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var files embed.FS

// Dialect selects a migration folder.
type Dialect string

const (
	// Postgres is PostgreSQL (12 or later).
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8 or MariaDB 10.5 or later.
	MySQL Dialect = "mysql"
	// SQLite is SQLite 3.42 or later (modernc.org/sqlite or
	// mattn/go-sqlite3, see sqlitedriver).
	SQLite Dialect = "sqlite"
)

// TableName is the goose version table sqlonce's migrations use.
const TableName = "sqlonce_goose_db_version"

// lockID is the PostgreSQL advisory lock that serialises concurrent runs of
// these migrations (several instances starting at once). It differs from
// goose's default, so the application's own goose runs are not blocked.
const lockID int64 = 0x73716c6f6e6365 // "sqlonce"

// FS returns the migration files of a dialect, for a goose of your own.
func FS(d Dialect) (fs.FS, error) {
	switch d {
	case Postgres, MySQL, SQLite:
		return fs.Sub(files, string(d))
	}
	return nil, fmt.Errorf("sqlonce/migrations: unknown dialect %q", d)
}

// NewProvider returns a goose provider for sqlonce's migrations on db, with
// the version table TableName. Extra options are passed to goose.
func NewProvider(d Dialect, db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	fsys, err := FS(d)
	if err != nil {
		return nil, err
	}
	gd := goose.DialectPostgres
	base := []goose.ProviderOption{goose.WithTableName(TableName), goose.WithDisableGlobalRegistry(true)}
	switch d {
	case MySQL:
		gd = goose.DialectMySQL
	case SQLite:
		// No session locker, as for MySQL: goose has none. Instances that
		// run Up at once on a fresh file race to create the tables, and
		// all but one fail; run migrations from one instance.
		gd = goose.DialectSQLite3
	default:
		if db != nil && db.Stats().MaxOpenConnections == 1 {
			// One connection cannot both hold txLocker's transaction and
			// run the migrations: a session lock on the migrations' own
			// connection, which a transaction pooler can strand.
			locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID))
			if err != nil {
				return nil, err
			}
			base = append(base, goose.WithSessionLocker(locker))
		} else {
			base = append(base, goose.WithLocker(&txLocker{}))
		}
	}
	return goose.NewProvider(gd, db, fsys, append(base, opts...)...)
}

// Up applies every pending sqlonce migration to db. It is safe to call at
// every start: applied migrations are skipped. For pgx users,
// stdlib.OpenDBFromPool(pool) gives the *sql.DB.
func Up(ctx context.Context, db *sql.DB, d Dialect) error {
	p, err := NewProvider(d, db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("sqlonce/migrations: up: %w", err)
	}
	return nil
}
