package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up; inTx runs a function in a transaction.

// A charge through an outside payment provider cannot sit inside a database
// transaction: a lease keeps duplicates out while it runs, and the recorded
// answer serves every retry after.
func ExampleStore_Claim() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "stripe-charges", Key: "order-42"}

	lease, res, err := store.Claim(ctx, req, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("claim:", res)

	// A retry that arrives while the charge is in flight is told so.
	_, _, err = store.Claim(ctx, req, 30*time.Second)
	fmt.Println("duplicate in flight:", errors.Is(err, sqlonce.ErrInProgress))

	chargeID := "ch_3Qx" // what the provider answered; pass lease.Token or the key along
	if err := store.Complete(ctx, lease, []byte(chargeID)); err != nil {
		panic(err)
	}

	_, res, err = store.Claim(ctx, req, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry after completion: %v, %s\n", res, res.Response)
	// Output:
	// claim: first run
	// duplicate in flight: true
	// retry after completion: already done, ch_3Qx
}

// A worker that must answer within its caller's deadline (a serverless
// function's time limit, an RPC's timeout) claims a lease that ends soon
// after that deadline: if the worker dies with its caller, a retry is
// not kept out for the whole lease it asked for.
func ExampleWithinDeadline() {
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the caller's deadline
	defer cancel()
	req := dedupe.Request{Scope: "emails", Key: "welcome-42"}

	_, res, err := store.Claim(ctx, req, 30*time.Minute, dedupe.WithinDeadline(time.Second))
	if err != nil {
		panic(err)
	}
	var bounded bool
	if err := db.QueryRowContext(ctx, `SELECT locked_until <= (unixepoch('subsec') + 3) * 1e6
		FROM sqlonce_keys WHERE idempotency_key = ?`, req.Key).Scan(&bounded); err != nil {
		panic(err)
	}
	fmt.Println("claim:", res)
	fmt.Println("lease ends by the deadline plus a second, not in 30 minutes:", bounded)
	// Output:
	// claim: first run
	// lease ends by the deadline plus a second, not in 30 minutes: true
}

// Purge removes expired keys in batches; run it from a ticker in any number
// of instances.
func ExampleStore_Purge() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	// Keys that expired an hour ago, written directly for the example.
	if _, err := db.ExecContext(ctx, `
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500)
		INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
		SELECT 'old', 'k' || i, 1, i, CAST((unixepoch() - 25*3600) * 1e6 AS INTEGER),
		       CAST((unixepoch() - 3600) * 1e6 AS INTEGER)
		FROM n`); err != nil {
		panic(err)
	}
	n, err := store.Purge(ctx, 1000)
	if err != nil {
		panic(err)
	}
	fmt.Println("purged:", n)
	// Output: purged: 2500
}

// Support's "why did my retry get the old answer?" and "let this customer
// retry": Inspect reads the key, Forget deletes it, and the next request
// with the key runs the work again.
func ExampleStore_Forget() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "customer-7", Key: "refund-3", Fingerprint: dedupe.Fingerprint([]byte("refund 30 EUR"))}
	run := func() {
		res, err := store.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			return []byte("declined: card expired"), nil
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%v: %s\n", res, res.Response)
	}
	run()
	run() // the retry gets the recorded answer

	info, err := store.Inspect(ctx, req.Scope, req.Key)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s, fingerprint %d bytes, response %d bytes, expires in %v\n",
		info.State, info.FingerprintSize, info.ResponseSize, info.Expires.Sub(info.Created))

	if err := store.Forget(ctx, req.Scope, req.Key); err != nil {
		panic(err)
	}
	_, err = store.Inspect(ctx, req.Scope, req.Key)
	fmt.Println("after Forget:", errors.Is(err, sqlonce.ErrNotFound))
	run() // runs again
	// Output:
	// first run: declined: card expired
	// already done: declined: card expired
	// done, fingerprint 32 bytes, response 22 bytes, expires in 24h0m0s
	// after Forget: true
	// first run: declined: card expired
}

// PurgeEvery purges in the background, from every instance of a program:
// they elect one that purges, and the others skip. Here three instances
// start at once, an Observer counts their first rounds, and one of them
// purged every expired key.
func ExampleStore_PurgeEvery() {
	db, drv, closeDB := openDB(tables)
	defer closeDB()
	if _, err := db.ExecContext(context.Background(), `
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500)
		INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
		SELECT 'old', 'k' || i, 1, i, CAST((unixepoch() - 25*3600) * 1e6 AS INTEGER),
		       CAST((unixepoch() - 3600) * 1e6 AS INTEGER)
		FROM n`); err != nil {
		panic(err)
	}
	rounds := make(chan sqlonce.Event, 3)
	observed := sqlonce.Observe(drv, sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) {
		if e.Operation == "PurgeEvery" {
			rounds <- e
		}
	}))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for range 3 { // three instances of a program, each with its Store
		store, err := dedupe.New(observed)
		if err != nil {
			panic(err)
		}
		go func() { done <- store.PurgeEvery(ctx, time.Hour, dedupe.PurgeBatch(1000)) }()
	}
	var purged, skipped, rows int64
	for range 3 { // each instance's first round, at once
		switch e := <-rounds; e.Status {
		case sqlonce.EventFirstRun:
			purged++
			rows += e.Rows
		case sqlonce.EventAlreadyDone:
			skipped++
		default:
			panic(e.Err)
		}
	}
	stop() // the program stops
	for range 3 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			panic(err)
		}
	}
	fmt.Printf("%d instance purged %d keys, %d skipped the round\n", purged, rows, skipped)
	// Output: 1 instance purged 2500 keys, 2 skipped the round
}
