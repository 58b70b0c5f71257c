package httpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// post sends a POST as user, with key as its Idempotency-Key unless
// empty, and prints the answer.
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
	db, drv, done := openDB(tables)
	defer done()

	m, err := httpidem.New(drv, func(r *http.Request) string {
		return r.Header.Get("X-User") // stands in for real authentication
	})
	if err != nil {
		panic(err)
	}
	pay := func(w http.ResponseWriter, r *http.Request) {
		tx, ok := httpidem.TxFrom[*sql.Tx](r.Context())
		if !ok { // only outside the middleware's transactional mode
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var id int64
		err := tx.QueryRowContext(r.Context(), "INSERT INTO ledger (ref, amount) VALUES (?, 100) RETURNING id", string(body)).Scan(&id)
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
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
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

// tables are the business tables the examples write.
const tables = `
CREATE TABLE ledger (
    id     INTEGER PRIMARY KEY,
    ref    TEXT    NOT NULL,
    amount INTEGER NOT NULL
);`

// openDB does what a program does once at start-up: it opens a SQLite
// database (here a new file, removed by done), installs sqlonce's tables
// with migrations.Up, creates the business tables and builds the driver.
// On PostgreSQL or MySQL only the handle and the driver differ: see
// pgxdriver, pgsqldriver and mysqldriver.
func openDB(tables string) (db *sql.DB, drv *sqlitedriver.Driver, done func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	db, err = modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	done = func() { db.Close(); os.RemoveAll(dir) }
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, tables); err != nil {
		panic(err)
	}
	drv, err = sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	return db, drv, done
}
