package dedupe_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up; inTx runs a function in a transaction.

// A handler that owns its transaction lets the Store run it: the charge,
// the key and the receipt commit together, and the retries get the first
// receipt back.
func ExampleStore_Run() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{
		Scope:       "payments",
		Key:         "pay-91c2",
		Fingerprint: dedupe.Fingerprint([]byte("POST /charges"), []byte(`{"amount":100}`)),
	}
	for range 3 {
		res, err := store.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			var id int64
			err := tx.QueryRowContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?) RETURNING id", req.Key, 100).Scan(&id)
			return fmt.Appendf(nil, `{"charge":%d}`, id), err
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(res, string(res.Response))
	}

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// first run {"charge":1}
	// already done {"charge":1}
	// already done {"charge":1}
	// ledger rows: 1
}

// RunJSON records a Go value; a repeat decodes it.
func ExampleRunJSON() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()

	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	type receipt struct {
		Ref    string `json:"ref"`
		Amount int    `json:"amount"`
	}
	for range 2 {
		r, res, err := dedupe.RunJSON(ctx, store, dedupe.Request{Scope: "orders-consumer", Key: "msg-0042"},
			func(ctx context.Context, tx *sql.Tx) (receipt, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", "msg-0042", 7)
				return receipt{Ref: "msg-0042", Amount: 7}, err
			})
		if err != nil {
			panic(err)
		}
		fmt.Println(res, r.Ref, r.Amount)
	}
	// Output:
	// first run msg-0042 7
	// already done msg-0042 7
}

// A consumer whose messages are seldom redelivered favors first runs:
// nothing is read before the work, and a redelivery runs the work, finds
// the key recorded, rolls the work back and answers with the first run's
// record. What each favor saves per database: docs/benchmarks.md.
func ExampleWithFavor() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	store, err := dedupe.New(drv, dedupe.WithFavor(dedupe.FavorFirstRuns))
	if err != nil {
		panic(err)
	}
	for range 2 {
		res, err := store.Run(ctx, dedupe.Request{Scope: "ledger-consumer", Key: "msg-7f3a"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", "msg-7f3a", 25)
			return []byte("applied"), err
		})
		if err != nil {
			panic(err)
		}
		fmt.Println(res, string(res.Response))
	}

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// first run applied
	// already done applied
	// ledger rows: 1
}

// RunBatch applies a batch of keys in a transaction of the Store's own,
// each key once: here a payment import run again after a crash that came
// after imp-1 had committed. fn gets only the keys not applied before.
func ExampleStore_RunBatch() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	amounts := map[string]int64{"imp-1": 100, "imp-2": 250, "imp-3": 50}
	apply := func(ctx context.Context, tx *sql.Tx, fresh []string) error {
		for _, id := range fresh {
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", id, amounts[id]); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := store.RunBatch(ctx, "import", []string{"imp-1"}, apply); err != nil {
		panic(err)
	}
	batch := []string{"imp-1", "imp-2", "imp-3"}
	res, err := store.RunBatch(ctx, "import", batch, apply)
	if err != nil {
		panic(err) // nothing of the batch was applied: run it again
	}
	for i, r := range res {
		fmt.Println(batch[i], r)
	}

	var n, sum int64
	if err := db.QueryRowContext(ctx, "SELECT count(*), sum(amount) FROM ledger").Scan(&n, &sum); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n, "total:", sum)
	// Output:
	// imp-1 already done
	// imp-2 first run
	// imp-3 first run
	// ledger rows: 3 total: 400
}
