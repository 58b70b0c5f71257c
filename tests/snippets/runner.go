//go:build ignore

// The runner of the program TestSnippets builds: it opens the target's
// database, migrates it, creates the tables the snippets use, and runs one
// snippet (see the package documentation in snippets_test.go).
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

type env struct {
	pool  *pgxpool.Pool
	db    *sql.DB
	pgxTx pgx.Tx
	// The target's driver, for snippets marked drv.
	pgxDrv    *pgxdriver.Driver
	pgsqlDrv  *pgsqldriver.Driver
	mysqlDrv  *mysqldriver.Driver
	sqliteDrv *sqlitedriver.Driver
	sqlTx     *sql.Tx
	logger    *slog.Logger
	mux       *http.ServeMux
	w         http.ResponseWriter
	r         *http.Request
	userID    func(*http.Request) string
	charge    func(ctx context.Context, idempotencyKey string) ([]byte, error)
}

// provider is a fake payment provider that, as real ones do, answers a
// repeated idempotency key with the first charge.
type provider struct {
	mu      sync.Mutex
	charges map[string][]byte
}

func (p *provider) charge(ctx context.Context, key string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.charges[key]; ok {
		return c, nil
	}
	c := []byte(fmt.Sprintf("ch_%d", len(p.charges)+1))
	p.charges[key] = c
	return c, nil
}

func newRequest() *http.Request {
	r := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":100}`))
	r.Header.Set("Idempotency-Key", `"k-1"`)
	r.Header.Set("Content-Type", "application/json")
	return r
}

var fixtures = map[string][]string{
	"postgres": {
		"CREATE TABLE ledger (ref VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, code VARCHAR(64) NOT NULL CONSTRAINT orders_code_key UNIQUE, status VARCHAR(16) NOT NULL, amount BIGINT NOT NULL, version BIGINT NOT NULL)",
		"CREATE TABLE stock (item VARCHAR(64) PRIMARY KEY, qty BIGINT NOT NULL)",
	},
	"mysql": {
		"CREATE TABLE ledger (ref VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, code VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, amount BIGINT NOT NULL, version BIGINT NOT NULL, UNIQUE KEY orders_code_key (code))",
		"CREATE TABLE stock (item VARCHAR(64) PRIMARY KEY, qty BIGINT NOT NULL)",
	},
	"sqlite": {
		"CREATE TABLE ledger (ref VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
		"CREATE TABLE orders (id BIGINT PRIMARY KEY, code VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL, amount BIGINT NOT NULL, version BIGINT NOT NULL)",
		"CREATE UNIQUE INDEX orders_code_key ON orders (code)",
		"CREATE TABLE stock (item VARCHAR(64) PRIMARY KEY, qty BIGINT NOT NULL)",
	},
}

var seed = []string{
	"INSERT INTO orders (id, code, status, amount, version) VALUES (1, 'A-1', 'created', 1000, 1)",
	"INSERT INTO stock (item, qty) VALUES ('sku-1', 10)",
}

func main() {
	target := flag.String("target", "", "pgx, pgsql, mysql or sqlite")
	dsn := flag.String("dsn", "", "the database (a file for sqlite)")
	name := flag.String("snippet", "", "the snippet's name")
	withTx := flag.Bool("tx", false, "give the snippet an open transaction")
	withHTTP := flag.Bool("http", false, "send a request through mux twice after the snippet")
	flag.Parse()
	if err := run(*target, *dsn, *name, *withTx, *withHTTP); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(target, dsn, name string, withTx, withHTTP bool) error {
	fn := snippets[name]
	if fn == nil {
		return fmt.Errorf("no snippet %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &env{
		logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		mux:    http.NewServeMux(),
		w:      httptest.NewRecorder(),
		r:      newRequest(),
		userID: func(*http.Request) string { return "u-1" },
		charge: (&provider{charges: map[string][]byte{}}).charge,
	}
	var err error
	dialect, fixture := migrations.Postgres, "postgres"
	switch target {
	case "pgx":
		if e.pool, err = pgxpool.New(ctx, dsn); err != nil {
			return err
		}
		defer e.pool.Close()
		e.db = stdlib.OpenDBFromPool(e.pool)
	case "pgsql":
		e.db, err = sql.Open("pgx", dsn)
	case "mysql":
		e.db, err = sql.Open("mysql", dsn)
		dialect, fixture = migrations.MySQL, "mysql"
	case "sqlite":
		e.db, err = modernc.Open(dsn)
		dialect, fixture = migrations.SQLite, "sqlite"
	default:
		return fmt.Errorf("unknown target %q", target)
	}
	if err != nil {
		return err
	}
	defer e.db.Close()
	if err := migrations.Up(ctx, e.db, dialect); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, q := range append(fixtures[fixture], seed...) {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("fixture %q: %w", q, err)
		}
	}
	switch target {
	case "pgx":
		e.pgxDrv, err = pgxdriver.New(e.pool)
	case "pgsql":
		e.pgsqlDrv, err = pgsqldriver.New(e.db)
	case "mysql":
		e.mysqlDrv, err = mysqldriver.New(e.db)
	case "sqlite":
		e.sqliteDrv, err = sqlitedriver.New(e.db)
	}
	if err != nil {
		return err
	}
	if withTx {
		if target == "pgx" {
			if e.pgxTx, err = e.pool.Begin(ctx); err != nil {
				return err
			}
			defer e.pgxTx.Rollback(ctx)
		} else {
			if e.sqlTx, err = e.db.BeginTx(ctx, nil); err != nil {
				return err
			}
			defer e.sqlTx.Rollback()
		}
	}
	if err := fn(ctx, e); err != nil {
		return fmt.Errorf("the snippet returned: %w", err)
	}
	if withTx {
		if target == "pgx" {
			err = e.pgxTx.Commit(ctx)
		} else {
			err = e.sqlTx.Commit()
		}
		if err != nil {
			return fmt.Errorf("commit after the snippet: %w", err)
		}
	}
	if withHTTP {
		for i := range 2 {
			rec := httptest.NewRecorder()
			e.mux.ServeHTTP(rec, newRequest().WithContext(ctx))
			if rec.Code >= 300 {
				body, _ := io.ReadAll(rec.Body)
				return fmt.Errorf("request %d through mux: %d %s", i+1, rec.Code, body)
			}
		}
	}
	return nil
}
