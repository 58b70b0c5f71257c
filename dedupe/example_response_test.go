package dedupe_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up; inTx runs a function in a transaction.

// A repeat gets the first run's answer back, byte for byte.
func ExampleStore_DoResponse() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}

	createOrder := func() {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "client-42", Key: "create-order-1"},
				func(ctx context.Context) ([]byte, error) {
					var id int64
					err := tx.QueryRowContext(ctx, "INSERT INTO orders (code) VALUES ('A-1') RETURNING id").Scan(&id)
					return fmt.Appendf(nil, `{"order_id":%d}`, id), err
				})
			if err != nil {
				return err
			}
			fmt.Printf("%v: %s\n", res, res.Response)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	createOrder()
	createOrder()
	// Output:
	// first run: {"order_id":1}
	// already done: {"order_id":1}
}

type receipt struct {
	OrderID int64  `json:"order_id"`
	Status  string `json:"status"`
}

// DoJSON records and replays a Go value.
func ExampleDoJSON() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "client-42", Key: "checkout-9", Fingerprint: dedupe.Fingerprint([]byte("POST /checkout"), []byte(`{"cart":9}`))}
	for range 2 {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			r, res, err := dedupe.DoJSON(ctx, store, tx, req, func(ctx context.Context) (receipt, error) {
				var id int64
				err := tx.QueryRowContext(ctx, "INSERT INTO orders (code, status) VALUES ('C-9', 'paid') RETURNING id").Scan(&id)
				return receipt{OrderID: id, Status: "paid"}, err
			})
			if err != nil {
				return err
			}
			fmt.Printf("%v: %+v\n", res, r)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run: {OrderID:1 Status:paid}
	// already done: {OrderID:1 Status:paid}
}

// Caller-supplied serial numbers: the scope is the authenticated caller, so
// two callers' serial number 1 never collide, and neither can read the
// other's answer.
func Example_serialNumbers() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	submit := func(caller, serial string) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{})
		if err != nil {
			panic(err)
		}
		defer tx.Rollback()
		res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: caller, Key: serial},
			func(ctx context.Context) ([]byte, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", caller+"/"+serial)
				return []byte("accepted by " + caller), err
			})
		if err != nil {
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Printf("%s #%s: %v (%s)\n", caller, serial, res, res.Response)
	}
	submit("alice", "1")
	submit("bob", "1")
	submit("alice", "1")
	// Output:
	// alice #1: first run (accepted by alice)
	// bob #1: first run (accepted by bob)
	// alice #1: already done (accepted by alice)
}
