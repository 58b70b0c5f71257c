package httpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sqlonce/sqlonce/httpidem"
)

// Transactional mode on the caller's own transactions: a TxFunc around
// db.BeginTx, here one that counts them (a pgx program wraps
// pgx.BeginTxFunc to choose the isolation level).
func ExampleNewWithTxFunc() {
	db, drv, done := openDB(tables)
	defer done()

	begun := 0
	inTx := func(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
		begun++
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	m, err := httpidem.NewWithTxFunc(drv, func(r *http.Request) string { return r.Header.Get("X-User") }, inTx)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFrom[*sql.Tx](r.Context())
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO ledger (ref, amount) VALUES ('r-1', 5)"); err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "booked")
	})))
	defer srv.Close()

	post(srv.URL+"/bookings", "alice", `"b-1"`, "")
	post(srv.URL+"/bookings", "alice", `"b-1"`, "") // a retry
	fmt.Println("transactions:", begun)
	// Output:
	// 201 replayed=false booked
	// 201 replayed=true booked
	// transactions: 2
}

// Lease mode for work outside the database: the provider is charged once,
// with the lease's fencing token, and the retry gets the first answer.
func ExampleNewLeased() {
	_, drv, done := openDB(tables)
	defer done()

	m, err := httpidem.NewLeased(drv, func(r *http.Request) string { return r.Header.Get("X-User") }, 0)
	if err != nil {
		panic(err)
	}
	charges := 0
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lease, _ := httpidem.LeaseFrom(r.Context())
		charges++ // a provider's API, given lease.Token to refuse a stale caller
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged, token>0=%v", lease.Token > 0)
	})))
	defer srv.Close()

	post(srv.URL+"/charges", "alice", `"c-1"`, "100")
	post(srv.URL+"/charges", "alice", `"c-1"`, "100") // a retry
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed=false charged, token>0=true
	// 201 replayed=true charged, token>0=true
	// charges: 1
}
