package httpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

func post(url, user, key, body string) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-User", user)
	if key != "" {
		req.Header.Set(httpidem.Header, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		fmt.Printf("%d %s\n", resp.StatusCode, b)
		return
	}
	fmt.Printf("%d replayed=%v %s\n", resp.StatusCode, resp.Header.Get(httpidem.ReplayHeader) == "true", b)
}

// A payment endpoint in transactional mode: the ledger write, the key and
// the recorded answer commit together. The retry gets the first answer;
// the same key on another payment is refused.
func Example() {
	ctx := context.Background()
	pool := postgres("httpidem")
	defer pool.Close()

	m, err := httpidem.New(pgxdriver.New(pool), func(r *http.Request) string {
		return r.Header.Get("X-User") // stands in for real authentication
	})
	if err != nil {
		panic(err)
	}
	pay := func(w http.ResponseWriter, r *http.Request) {
		tx, ok := httpidem.TxFrom[pgx.Tx](r.Context())
		if !ok { // only outside the middleware's transactional mode
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var id int64
		err := tx.QueryRow(r.Context(), "INSERT INTO ledger (ref, amount) VALUES ($1, 100) RETURNING id", string(body)).Scan(&id)
		if err != nil {
			httpidem.Fail(r.Context(), err) // rolled back, run again if the database asks
			http.Error(w, "payment failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d}`, id)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(pay)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	key := `"8e03978e-40d5-43e8-bc93-6894a57f9324"`
	post(srv.URL+"/payments", "alice", key, "invoice-7")
	post(srv.URL+"/payments", "alice", key, "invoice-7") // a retry
	post(srv.URL+"/payments", "alice", key, "invoice-8") // the key reused
	post(srv.URL+"/payments", "alice", "", "invoice-9")  // no key

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// 201 replayed=false {"payment":1}
	// 201 replayed=true {"payment":1}
	// 422 {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used with a different request; use a new key for a new request","code":"idempotency-key-reused"}
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"this operation requires an Idempotency-Key header with a unique key per operation, sent again unchanged on every retry","code":"idempotency-key-missing"}
	// ledger rows: 1
}

// A form posted without a key, guarded against double submits on MySQL:
// the key is derived from the caller, the route and the body, for a short
// window.
func ExampleWithNoRepeatSubmit() {
	db := mariadb("httpidem")
	defer db.Close()

	m, err := httpidem.New(mysqldriver.New(db),
		func(r *http.Request) string { return r.Header.Get("X-User") },
		httpidem.WithNoRepeatSubmit(10*time.Second))
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
	order := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order %d placed", orders.Add(1))
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(order)))
	defer srv.Close()

	post(srv.URL+"/checkout", "alice", "", "item=42&qty=1")
	post(srv.URL+"/checkout", "alice", "", "item=42&qty=1") // double click
	post(srv.URL+"/checkout", "alice", "", "item=42&qty=2") // another order
	// Output:
	// 200 replayed=false order 1 placed
	// 200 replayed=true order 1 placed
	// 200 replayed=false order 2 placed
}

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up and creates the business table.
// Each example works in a schema of its own, emptied on every run, so that
// its output is the same each time.
func postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	schema := "example_" + name
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	// sqlonce's tables: goose runs on database/sql.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	// The business table the examples write.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE ledger (
		    id     bigserial PRIMARY KEY,
		    ref    text   NOT NULL,
		    amount bigint NOT NULL
		)`); err != nil {
		panic(err)
	}
	return pool
}

// mariadb does what a program does once at start-up: it connects to
// MySQL or MariaDB (SQLONCE_MYSQL_DSN, or the local default below) and
// installs sqlonce's tables with migrations.Up. Each example works in a
// database of its own, emptied on every run, so that its output is the
// same each time.
func mariadb(name string) *sql.DB {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	cfg.DBName = "example_" + name
	for _, q := range []string{"DROP DATABASE IF EXISTS " + cfg.DBName, "CREATE DATABASE " + cfg.DBName} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		panic(err)
	}
	return db
}
