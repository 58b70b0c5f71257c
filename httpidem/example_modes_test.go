package httpidem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// Transactional mode on the caller's transactions: every request runs at
// SERIALIZABLE, through pgx.BeginTxFunc.
func ExampleNewWithTxFunc() {
	pool := postgres("httpidem_txfunc")
	defer pool.Close()

	serializable := func(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
		return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error { return fn(ctx, tx) })
	}
	m, err := httpidem.NewWithTxFunc(pgxdriver.New(pool), func(r *http.Request) string { return r.Header.Get("X-User") }, serializable)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFrom[pgx.Tx](r.Context())
		var level string
		if err := tx.QueryRow(r.Context(), "SHOW transaction_isolation").Scan(&level); err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, level)
	})))
	defer srv.Close()

	post(srv.URL+"/report", "alice", `"r-1"`, "")
	post(srv.URL+"/report", "alice", `"r-1"`, "") // a retry
	// Output:
	// 200 replayed=false serializable
	// 200 replayed=true serializable
}

// Lease mode for work outside the database: the provider is charged once,
// with the lease's fencing token, and the retry gets the first answer.
func ExampleNewLeased() {
	pool := postgres("httpidem_leased")
	defer pool.Close()

	m, err := httpidem.NewLeased(pgxdriver.New(pool), func(r *http.Request) string { return r.Header.Get("X-User") }, 0)
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
