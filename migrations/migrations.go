package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
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

// lockID seeds the PostgreSQL advisory lock that serialises concurrent
// runs of these migrations in a schema (several instances starting at
// once; see schemaLockKey). It differs from goose's default, so the
// application's own goose runs are not blocked.
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
// the version table TableName. Extra options are passed to goose. An
// unknown dialect, a nil db, or a db whose database/sql driver is known to
// speak another dialect than d is an error matching
// sqlonce.ErrInvalidArgument, naming both, before any SQL runs.
func NewProvider(d Dialect, db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	if err := checkHandle(db, d); err != nil {
		return nil, err
	}
	var locker *mysqlLocker
	if d == MySQL {
		locker = &mysqlLocker{}
	}
	return newProvider(d, db, nil, locker, opts...)
}

// dialects are the Dialects by the internal/driver dialect they speak.
var dialects = map[string]Dialect{driver.Postgres: Postgres, driver.MySQL: MySQL, driver.SQLite: SQLite}

// dialectNames name the Dialects as a caller writes them.
var dialectNames = map[Dialect]string{Postgres: "migrations.Postgres", MySQL: "migrations.MySQL", SQLite: "migrations.SQLite"}

// checkHandle refuses an unknown dialect, a nil db, and a db whose
// database/sql driver is known (by its type's package, as the drivers
// tell it) to speak another dialect than d. A driver it does not know (a
// wrapper such as otelsql) passes.
func checkHandle(db *sql.DB, d Dialect) error {
	if _, ok := dialectNames[d]; !ok {
		return fmt.Errorf("%w: sqlonce/migrations: unknown dialect %q", sqlonce.ErrInvalidArgument, d)
	}
	if db == nil {
		return fmt.Errorf("%w: sqlonce/migrations: nil *sql.DB", sqlonce.ErrInvalidArgument)
	}
	got, pkg := driver.SQLDialect(db)
	if got == "" || dialects[got] == d {
		return nil
	}
	return fmt.Errorf("%w: sqlonce/migrations: dialect %s given a %s handle (%s); use %s",
		sqlonce.ErrInvalidArgument, d, driver.DialectName(got), pkg, dialectNames[dialects[got]])
}

// newProvider is NewProvider for the tables in schema (nil: where the
// connection finds them). On MySQL, locker (nil: none) is goose's locker.
func newProvider(d Dialect, db *sql.DB, schema *driver.Schema, locker *mysqlLocker, opts ...goose.ProviderOption) (*goose.Provider, error) {
	fsys, err := FS(d)
	if err != nil {
		return nil, err
	}
	table := TableName
	var lockSchema any // NULL: the session's current_schema()
	if schema != nil {
		if fsys, err = qualified(fsys, schema); err != nil {
			return nil, err
		}
		table = schema.Name() + "." + TableName
		lockSchema = schema.Name()
	}
	gd := goose.DialectPostgres
	base := []goose.ProviderOption{goose.WithTableName(table), goose.WithDisableGlobalRegistry(true)}
	switch d {
	case MySQL:
		// goose's own check of the version table fails through vtgate
		// (see mysqlStore); goose has no lock for MySQL (see mysqlLocker).
		gd = goose.DialectMySQL
		if schema == nil {
			// A qualified table is checked by its schema's name, which
			// works through vtgate.
			store, err := newMySQLStore(table)
			if err != nil {
				return nil, err
			}
			gd, base = goose.DialectCustom, []goose.ProviderOption{goose.WithStore(store), goose.WithDisableGlobalRegistry(true)}
		}
		if locker != nil {
			base = append(base, goose.WithLocker(locker))
		}
	case SQLite:
		// No locker: see Up.
		gd = goose.DialectSQLite3
	default:
		if db != nil && db.Stats().MaxOpenConnections == 1 {
			// One connection cannot both hold txLocker's transaction and
			// run the migrations: a session lock on the migrations' own
			// connection, which a transaction pooler can strand.
			id := lockID
			var err error
			if db != nil {
				// The schema's key, as txLocker takes it.
				if err = db.QueryRow("SELECT "+schemaLockKey, lockID, lockSchema).Scan(&id); err != nil {
					return nil, fmt.Errorf("sqlonce/migrations: lock key: %w", err)
				}
			}
			locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(id))
			if err != nil {
				return nil, err
			}
			base = append(base, goose.WithSessionLocker(locker))
		} else {
			base = append(base, goose.WithLocker(&txLocker{schema: lockSchema}))
		}
	}
	return goose.NewProvider(gd, db, fsys, append(base, opts...)...)
}

// Up applies every pending sqlonce migration to db. It is safe to call at
// every start: applied migrations are skipped. For pgx users,
// stdlib.OpenDBFromPool(pool) gives the *sql.DB. WithSchema puts the
// tables in a schema (MySQL: a database) of their own.
//
// Before any SQL runs, Up returns an error matching
// sqlonce.ErrInvalidArgument for a nil Option or an invalid one, and as
// NewProvider does for d and db: a dialect that does not match the
// handle's database/sql driver is refused, naming both, and leaves
// nothing behind.
func Up(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) (err error) {
	var o options
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: sqlonce/migrations: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	if err := checkHandle(db, d); err != nil {
		return err
	}
	var schema *driver.Schema
	if o.schema != "" {
		var err error
		if schema, err = createSchema(ctx, db, d, o.schema); err != nil {
			return err
		}
	}
	if d == MySQL {
		// The lock around all of goose's run (see mysqlLocker).
		l := &mysqlLocker{}
		if schema != nil {
			l.database = schema.Name()
		}
		if err := l.Lock(ctx, db); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, l.Unlock(context.WithoutCancel(ctx), db)) }()
	}
	// SQLite has no lock goose's run could hold (its one lock, the
	// database's write lock, is taken by each migration's transaction):
	// instances running Up at once on a fresh file each apply what they
	// find pending, and a migration another instance applied first fails
	// whole, its transaction rolled back. Up then runs again while the
	// database's version advanced since its last try, and returns the
	// error of a try after which it did not.
	last := int64(-1)
	for {
		p, err := newProvider(d, db, schema, nil)
		if err != nil {
			return err
		}
		_, err = p.Up(ctx)
		if err == nil {
			return nil
		}
		err = fmt.Errorf("sqlonce/migrations: up: %w", err)
		if d != SQLite || ctx.Err() != nil {
			return err
		}
		v, verr := p.GetDBVersion(ctx)
		if verr != nil || v <= last {
			return err
		}
		last = v
	}
}

// Option configures Up, which applies and validates it.
type Option func(*options) error

type options struct{ schema string }

// WithSchema makes Up create sqlonce's tables, and its version table, in
// the named PostgreSQL schema or MySQL/MariaDB database, created first if
// it does not exist, instead of where the connection finds them: the
// tables a driver built with pgxdriver.WithSchema, pgsqldriver.WithSchema
// or mysqldriver.WithDatabase of the same name uses. Every statement
// names the tables qualified, so it works through PgBouncer's transaction
// pooling. The name is an unquoted, lower-case identifier (a letter or _,
// then letters, digits or _, at most 63 bytes); another, or SQLite, which
// has no schemas, makes Up return an error matching
// sqlonce.ErrInvalidArgument before any SQL runs.
func WithSchema(name string) Option {
	return func(o *options) error {
		if _, err := driver.NewSchema(driver.Postgres, name); err != nil {
			return fmt.Errorf("%w: sqlonce/migrations: WithSchema: %v", sqlonce.ErrInvalidArgument, err)
		}
		o.schema = name
		return nil
	}
}

// createSchema validates name and creates the schema (database) if it
// does not exist.
func createSchema(ctx context.Context, db *sql.DB, d Dialect, name string) (*driver.Schema, error) {
	var (
		dialect = driver.Postgres
		create  = "CREATE SCHEMA IF NOT EXISTS "
	)
	switch d {
	case Postgres:
	case MySQL:
		dialect, create = driver.MySQL, "CREATE DATABASE IF NOT EXISTS "
	default:
		return nil, fmt.Errorf("%w: sqlonce/migrations: dialect %q has no schemas", sqlonce.ErrInvalidArgument, d)
	}
	s, err := driver.NewSchema(dialect, name)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlonce/migrations: %v", sqlonce.ErrInvalidArgument, err)
	}
	if d == MySQL {
		// CREATE DATABASE IF NOT EXISTS of concurrent sessions: one
		// creates it, the others find it.
		if _, err := db.ExecContext(ctx, create+s.Quoted()); err != nil {
			return nil, fmt.Errorf("sqlonce/migrations: create schema %s: %w", s.Quoted(), err)
		}
		return s, nil
	}
	// PostgreSQL's CREATE SCHEMA IF NOT EXISTS of concurrent sessions
	// fails in all but one (23505 on pg_namespace_nspname_index): it is
	// created under the schema's migration lock (see txLocker), in a
	// transaction that ends before the migrations take that lock again.
	if err := inTx(ctx, db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock("+schemaLockKey+")", lockID, s.Name()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, create+s.Quoted())
		return err
	}); err != nil {
		return nil, fmt.Errorf("sqlonce/migrations: create schema %s: %w", s.Quoted(), err)
	}
	return s, nil
}

// inTx runs fn in a transaction on db and commits it.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// qualified returns the migration files of fsys with sqlonce's tables
// qualified by s, as the drivers qualify their statements.
func qualified(fsys fs.FS, s *driver.Schema) (fs.FS, error) {
	out := fstest.MapFS{}
	err := fs.WalkDir(fsys, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		out[path] = &fstest.MapFile{Data: []byte(s.Qualify(string(b))), Mode: 0o444}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlonce/migrations: %w", err)
	}
	return out, nil
}
