package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// connectTimeout bounds how long a server that does not answer is waited for.
const connectTimeout = 5 * time.Second

// scanner is a row: pgx.Row and *sql.Row.
type scanner interface{ Scan(dest ...any) error }

// backend is one database seen through the driver of TTx, with the few
// operations the commands need written once for every dialect.
type backend[TTx any] struct {
	dialect migrations.Dialect
	// label names the database for people: "SQLite file /tmp/x.db".
	label string
	// db serves migrations and the reads outside transactions.
	db     *sql.DB
	driver sqlonce.Driver[TTx]
	// schema holds sqlonce's tables (--schema): nil for where the
	// connection finds them.
	schema *driver.Schema

	begin    func(ctx context.Context) (TTx, error)
	commit   func(ctx context.Context, tx TTx) error
	rollback func(ctx context.Context, tx TTx) error
	// exec and queryRow take "?" placeholders on every dialect.
	exec     func(ctx context.Context, tx TTx, query string, args ...any) (int64, error)
	queryRow func(ctx context.Context, tx TTx, query string, args ...any) scanner

	close func()
}

// inTx runs fn in a transaction and commits it, running it again while
// the error is one sqlonce.IsRetryable accepts, as every caller should,
// with the attempts and pauses of sqlonce's own transactions.
func (b *backend[TTx]) inTx(ctx context.Context, fn func(tx TTx) error) error {
	return owntx.Retry(ctx, func() error { return b.tryTx(ctx, fn) })
}

func (b *backend[TTx]) tryTx(ctx context.Context, fn func(tx TTx) error) error {
	tx, err := b.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = b.rollback(ctx, tx)
		return err
	}
	return b.commit(ctx, tx)
}

// qualify names sqlonce's tables in query by the backend's schema.
func (b *backend[TTx]) qualify(query string) string { return b.schema.Qualify(query) }

// provider is the goose provider of sqlonce's migrations on b.
func (b *backend[TTx]) provider() (*goose.Provider, error) {
	if b.schema != nil {
		return migrations.NewSchemaProvider(b.dialect, b.db, b.schema.Name())
	}
	return migrations.NewProvider(b.dialect, b.db)
}

// rebind turns "?" placeholders into PostgreSQL's $1, $2, ...
func (b *backend[TTx]) rebind(query string) string {
	if b.dialect != migrations.Postgres {
		return query
	}
	return rebindPG(query)
}

func rebindPG(query string) string {
	var sb strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			sb.WriteString("$" + strconv.Itoa(n))
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// opened is a *backend[pgx.Tx] or a *backend[*sql.Tx].
type opened any

// The kinds of database a DSN names.
const (
	kindPostgres = "postgres"
	kindMySQL    = "mysql"
	kindSQLite   = "sqlite"
)

var (
	// urlScheme is a URL's scheme, before "://".
	urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	// mysqlDSN is go-sql-driver/mysql's DSN: [user[:pass]@][tcp(addr)]/db.
	mysqlDSN = regexp.MustCompile(`(^|@)(tcp|tcp6|unix)\(|@/`)
	// pgKeyValue is a libpq key=value DSN: "host=db user=app dbname=shop".
	pgKeyValue = regexp.MustCompile(`^\s*[a-z_]+\s*=`)
	// sqliteExt is a file name that says it is a SQLite database.
	sqliteExt = regexp.MustCompile(`(?i)\.(db|db3|sqlite|sqlite3)$`)
)

const dsnWant = "want postgres://..., host=... dbname=..., user@tcp(host:3306)/db, or a SQLite file such as ./app.db ('sqlonce help' lists the forms)"

// parseDSN tells which database dsn names, in the forms each driver's
// users write (see dsnHelp), and returns what that driver takes.
func parseDSN(dsn string) (kind, rest string, err error) {
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok && urlScheme.MatchString(scheme) {
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			return kindPostgres, dsn, nil
		case "mysql":
			return kindMySQL, rest, nil
		case "sqlite", "sqlite3", "file":
			return kindSQLite, rest, nil
		}
		return "", "", fmt.Errorf("unknown DSN scheme %q: %s", scheme, dsnWant)
	}
	switch {
	case strings.HasPrefix(dsn, "file:"):
		return kindSQLite, strings.TrimPrefix(dsn, "file:"), nil
	case mysqlDSN.MatchString(dsn):
		return kindMySQL, dsn, nil
	case pgKeyValue.MatchString(dsn):
		return kindPostgres, dsn, nil
	case strings.ContainsRune(dsn, '/') || strings.ContainsRune(dsn, filepath.Separator) || sqliteExt.MatchString(dsn):
		return kindSQLite, dsn, nil
	}
	return "", "", fmt.Errorf("%q is not a DSN: %s", redact(dsn), dsnWant)
}

// open connects to dsn and checks that the server answers. schema names
// the PostgreSQL schema or MySQL database of sqlonce's tables ("" for
// where the connection finds them). create says whether a missing SQLite
// file may be created.
func open(ctx context.Context, dsn, schema string, create bool) (opened, error) {
	kind, rest, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case kindPostgres:
		return openPostgres(ctx, rest, schema)
	case kindMySQL:
		return openMySQL(ctx, rest, schema)
	}
	if schema != "" {
		return nil, usagef("--schema %q: SQLite has no schemas; give the file of sqlonce's tables as --db", schema)
	}
	return openSQLite(rest, create)
}

// checkSchema validates a --schema name for dialect.
func checkSchema(dialect, name string) (*driver.Schema, error) {
	if name == "" {
		return nil, nil
	}
	s, err := driver.NewSchema(dialect, name)
	if err != nil {
		return nil, usagef("--schema: %v", err)
	}
	return s, nil
}

// schemaLabel names --schema in a backend's label.
func schemaLabel(schema string) string {
	if schema == "" {
		return ""
	}
	return ", sqlonce's tables in " + schema
}

func openPostgres(ctx context.Context, dsn, schema string) (opened, error) {
	sch, err := checkSchema(driver.Postgres, schema)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad PostgreSQL DSN: %v", errors.Unwrap(err))
	}
	cfg.MaxConns = 16
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s:%d: %v", cfg.ConnConfig.Host, cfg.ConnConfig.Port, connCause(err))
	}
	var opts []pgxdriver.Option
	if sch != nil {
		opts = append(opts, pgxdriver.WithSchema(schema))
	}
	drv, err := pgxdriver.New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	return &backend[pgx.Tx]{
		dialect: migrations.Postgres,
		label:   fmt.Sprintf("PostgreSQL at %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database) + schemaLabel(schema),
		db:      db,
		driver:  drv,
		schema:  sch,
		begin: func(ctx context.Context) (pgx.Tx, error) {
			return pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		},
		commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		exec: func(ctx context.Context, tx pgx.Tx, query string, args ...any) (int64, error) {
			tag, err := tx.Exec(ctx, rebindPG(query), args...)
			return tag.RowsAffected(), err
		},
		queryRow: func(ctx context.Context, tx pgx.Tx, query string, args ...any) scanner {
			return tx.QueryRow(ctx, rebindPG(query), args...)
		},
		close: func() { db.Close(); pool.Close() },
	}, nil
}

func openMySQL(ctx context.Context, dsn, schema string) (opened, error) {
	sch, err := checkSchema(driver.MySQL, schema)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad MySQL DSN (want user:pass@tcp(host:3306)/db): %v", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Timeout == 0 {
		cfg.Timeout = connectTimeout
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach MySQL at %s: %v", cfg.Addr, connCause(err))
	}
	if cfg.DBName == "" {
		db.Close()
		return nil, errors.New("the MySQL DSN names no database: user@tcp(host:3306)/db")
	}
	var opts []mysqldriver.Option
	if sch != nil {
		opts = append(opts, mysqldriver.WithDatabase(schema))
	}
	drv, err := mysqldriver.New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	b := sqlBackend(migrations.MySQL, fmt.Sprintf("MySQL/MariaDB at %s/%s", cfg.Addr, cfg.DBName)+schemaLabel(schema), db, drv,
		&sql.TxOptions{Isolation: sql.LevelReadCommitted})
	b.schema = sch
	return b, nil
}

func openSQLite(path string, create bool) (opened, error) {
	if path == "" {
		return nil, errors.New("the SQLite DSN names no file: ./app.db, sqlite://path/to/app.db")
	}
	if strings.ContainsRune(path, '?') {
		// modernc.Open sets the parameters sqlitedriver needs (WAL,
		// busy_timeout, immediate transactions) and takes a path only.
		return nil, fmt.Errorf("SQLite DSN %q: parameters after '?' are not taken; sqlonce sets its own (WAL, busy_timeout)", path)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !create {
		return nil, fmt.Errorf("no SQLite database at %s", path)
	}
	db, err := modernc.Open(path)
	if err != nil {
		return nil, err
	}
	drv, err := sqlitedriver.New(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return sqlBackend(migrations.SQLite, "SQLite file "+path, db, drv, nil), nil
}

// sqlBackend serves MySQL and SQLite, both through database/sql.
func sqlBackend(d migrations.Dialect, label string, db *sql.DB, drv sqlonce.Driver[*sql.Tx], opts *sql.TxOptions) *backend[*sql.Tx] {
	return &backend[*sql.Tx]{
		dialect:  d,
		label:    label,
		db:       db,
		driver:   drv,
		begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, opts) },
		commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		exec: func(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
			res, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		},
		queryRow: func(ctx context.Context, tx *sql.Tx, query string, args ...any) scanner {
			return tx.QueryRowContext(ctx, query, args...)
		},
		close: func() { db.Close() },
	}
}

// rootCause drops the wrapping layers a driver adds, keeping the last
// message: "dial tcp 127.0.0.1:5999: connect: connection refused".
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// connCause says why a connection failed in one short phrase: the network
// error ("dial tcp 127.0.0.1:5999: connect: connection refused") or the
// server's own answer. pgx joins one error per address it tried.
func connCause(err error) error {
	if opErr, ok := errors.AsType[*net.OpError](err); ok {
		return opErr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr
	}
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return myErr
	}
	return rootCause(err)
}

// pgPassword is a password in a key=value DSN.
var pgPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redact hides a password in a DSN shown back to the user.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxx")
			return u.String()
		}
	}
	if cfg, err := mysql.ParseDSN(dsn); err == nil && cfg.Passwd != "" {
		cfg.Passwd = "xxx"
		return cfg.FormatDSN()
	}
	return pgPassword.ReplaceAllString(dsn, "${1}xxx")
}
