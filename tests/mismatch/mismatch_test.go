// Package mismatch checks that every driver refuses a database handle, or
// a transaction, of another database with an error matching
// sqlonce.ErrInvalidArgument before any of its statements runs: at New
// for a database/sql driver it knows (naming the handle's library and the
// driver to use), at the first call for one it does not (a wrapper, as
// otelsql is). New refuses a nil handle.
package mismatch

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// wrapped is a database/sql driver that no check knows, as a tracing
// wrapper is: its connections are the wrapped driver's.
type wrapped struct{ d driver.Driver }

func (w wrapped) Open(name string) (driver.Conn, error) { return w.d.Open(name) }

type wrapConnector struct {
	d   driver.Driver
	dsn string
}

func (c wrapConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c wrapConnector) Driver() driver.Driver                        { return wrapped{c.d} }

// handle is a database of one kind, opened through one database/sql driver.
type handle struct {
	name    string // for the subtest
	dialect string // "postgres", "mysql", "sqlite"
	sqlName string // database/sql driver name
	dsn     string
	pkg     string // the database/sql driver's package
}

// use is the driver a refusal names for a handle of each database.
var use = map[string]string{"postgres": "pgsqldriver (or pgxdriver", "mysql": "use mysqldriver", "sqlite": "use sqlitedriver"}

func open(t *testing.T, h handle, wrap bool) *sql.DB {
	t.Helper()
	db, err := sql.Open(h.sqlName, h.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if !wrap {
		return db
	}
	w := sql.OpenDB(wrapConnector{d: db.Driver(), dsn: h.dsn})
	t.Cleanup(func() { w.Close() })
	return w
}

// ordersTable is a table with a unique constraint, in every dialect, that
// unique.Insert is pointed at: a driver of the wrong database must refuse
// before the insert runs, never report its duplicate-key error raw.
var ordersTable = map[string]string{
	"postgres": "CREATE TABLE mm_orders (code text CONSTRAINT mm_orders_code_key UNIQUE)",
	"mysql":    "CREATE TABLE mm_orders (code VARCHAR(64), UNIQUE KEY mm_orders_code_key (code))",
	"sqlite":   "CREATE TABLE mm_orders (code TEXT); CREATE UNIQUE INDEX mm_orders_code_key ON mm_orders (code)",
}

func handles(t *testing.T) []handle {
	pg := testdb.NewPostgres(t, 2).DSN
	my := testdb.NewMySQL(t, 2).DSN
	lite := testdb.NewSQLite(t, 2).DSN
	return []handle{
		{"pgx-stdlib", "postgres", "pgx", pg, "github.com/jackc/pgx/v5/stdlib"},
		{"lib-pq", "postgres", "postgres", pg, "github.com/lib/pq"},
		{"mysql", "mysql", "mysql", my, "github.com/go-sql-driver/mysql"},
		{"sqlite", "sqlite", modernc.DriverName, lite, "modernc.org/sqlite"},
	}
}

type driverCase struct {
	name    string
	dialect string
	// new builds the driver; sqlitedriver.New may refuse the handle itself.
	new func(*sql.DB) (sqlonce.Driver[*sql.Tx], error)
}

var drivers = []driverCase{
	{"pgsqldriver", "postgres", func(db *sql.DB) (sqlonce.Driver[*sql.Tx], error) { return pgsqldriver.New(db) }},
	{"mysqldriver", "mysql", func(db *sql.DB) (sqlonce.Driver[*sql.Tx], error) { return mysqldriver.New(db) }},
	{"sqlitedriver", "sqlite", func(db *sql.DB) (sqlonce.Driver[*sql.Tx], error) {
		d, err := sqlitedriver.New(db)
		if err != nil {
			return nil, err
		}
		return d, nil
	}},
}

func TestWrongDatabase(t *testing.T) {
	ctx := context.Background()
	hs := handles(t)
	made := map[string]bool{}
	for _, h := range hs {
		if made[h.dsn] {
			continue // pgx's stdlib and lib/pq share one schema
		}
		made[h.dsn] = true
		setup := open(t, h, false)
		if _, err := setup.ExecContext(ctx, ordersTable[h.dialect]); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
		if _, err := setup.ExecContext(ctx, "INSERT INTO mm_orders (code) VALUES ('A-1')"); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
	}
	for _, h := range hs {
		for _, d := range drivers {
			for _, mode := range []string{"known", "wrapped", "nil"} {
				t.Run(h.name+"/"+d.name+"/"+mode, func(t *testing.T) {
					db := open(t, h, mode == "wrapped")
					var (
						drv sqlonce.Driver[*sql.Tx]
						err error
					)
					if mode == "nil" {
						drv, err = d.new(nil)
					} else {
						drv, err = d.new(db)
					}
					switch {
					case mode == "nil":
						if !errors.Is(err, sqlonce.ErrInvalidArgument) || drv != nil && !reflect.ValueOf(drv).IsNil() {
							t.Fatalf("New(nil): %v, %v; want an error matching ErrInvalidArgument", drv, err)
						}
						return
					case mode == "known" && h.dialect != d.dialect:
						// Known by its library: refused at New, naming the
						// library and the driver to use.
						if !errors.Is(err, sqlonce.ErrInvalidArgument) {
							t.Fatalf("New on another database: %v, want an error matching ErrInvalidArgument at New", err)
						}
						for _, s := range []string{d.name, h.pkg, use[h.dialect]} {
							if !strings.Contains(err.Error(), s) {
								t.Errorf("New on another database: %q does not name %q", err, s)
							}
						}
						return
					case err != nil && h.dialect == d.dialect:
						t.Fatalf("New on its own database: %v", err)
					case err != nil && !errors.Is(err, sqlonce.ErrInvalidArgument):
						t.Fatalf("New on another database: %v, want an error matching ErrInvalidArgument", err)
					case err != nil:
						return // refused at New
					}
					check(t, ctx, db, drv, h.dialect == d.dialect, mode)
				})
			}
		}
	}
}

func check(t *testing.T, ctx context.Context, db *sql.DB, drv sqlonce.Driver[*sql.Tx], same bool, mode string) {
	t.Helper()
	refused := func(what string, err error) {
		t.Helper()
		if same {
			if err != nil {
				t.Fatalf("%s on its own database: %v", what, err)
			}
			return
		}
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("%s on another database: %v, want an error matching ErrInvalidArgument", what, err)
		}
	}

	// unique.Insert of a code that exists: the duplicate of the wrong
	// database must never come back as the insert's own error.
	ins, err := unique.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ran := false
	res, err := ins.Insert(ctx, tx, "mm_orders_code_key", func(ctx context.Context) error {
		ran = true
		_, err := tx.ExecContext(ctx, "INSERT INTO mm_orders (code) VALUES ('A-1')")
		return err
	})
	refused("unique.Insert", err)
	if same && res.Outcome != sqlonce.AlreadyDone {
		t.Fatalf("unique.Insert of an existing code: %v, want already done", res)
	}
	if !same && ran {
		t.Fatal("unique.Insert ran the insert on another database")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// dedupe.Do in a caller's transaction.
	store, err := dedupe.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = store.Do(ctx, tx, dedupe.Request{Scope: "mm", Key: "k-" + mode}, func(ctx context.Context) error { return nil })
	refused("dedupe.Do", err)
	_ = tx.Rollback()

	// A token, in a caller's transaction.
	toks, err := token.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = toks.IssueTx(ctx, tx, "mm")
	refused("token.IssueTx", err)
	_ = tx.Rollback()

	// Store.Run, on the driver's handle.
	_, err = store.Run(ctx, dedupe.Request{Scope: "mm", Key: "run-" + mode}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		return []byte("r"), nil
	})
	refused("Store.Run", err)
}
