package dedupe_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// A payment request retried three times charges once. The key claim and
// the ledger write commit together.
func Example() {
	ctx := context.Background()
	pool := exampledb.Postgres("dedupe")
	defer pool.Close()

	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	charge := func(idemKey string) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.Do(ctx, tx, dedupe.Request{Scope: "payments", Key: idemKey},
				func(ctx context.Context) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", idemKey, 100)
					return err
				})
			if err != nil {
				return err
			}
			fmt.Println(idemKey, res)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	for range 3 {
		charge("pay-7f3a")
	}

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// pay-7f3a first run
	// pay-7f3a already done
	// pay-7f3a already done
	// ledger rows: 1
}

// The same with database/sql on MySQL or MariaDB.
func Example_mysql() {
	ctx := context.Background()
	db := exampledb.MySQL("dedupe")
	defer db.Close()

	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		res, err := store.Do(ctx, tx, dedupe.Request{Scope: "orders-consumer", Key: "msg-0001"},
			func(ctx context.Context) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", "msg-0001", 5)
				return err
			})
		if err != nil {
			_ = tx.Rollback()
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(res)
	}
	// Output:
	// first run
	// already done
}

// A repeat gets the first run's answer back, byte for byte.
func ExampleStore_DoResponse() {
	ctx := context.Background()
	pool := exampledb.Postgres("dedupe_response")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}

	createOrder := func() {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "client-42", Key: "create-order-1"},
				func(ctx context.Context) ([]byte, error) {
					var id int64
					err := tx.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('A-1') RETURNING id").Scan(&id)
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
	pool := exampledb.Postgres("dedupe_json")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "client-42", Key: "checkout-9", Fingerprint: dedupe.Fingerprint([]byte("POST /checkout"), []byte(`{"cart":9}`))}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			r, res, err := dedupe.DoJSON(ctx, store, tx, req, func(ctx context.Context) (receipt, error) {
				var id int64
				err := tx.QueryRow(ctx, "INSERT INTO orders (code, status) VALUES ('C-9', 'paid') RETURNING id").Scan(&id)
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
	db := exampledb.MySQL("dedupe_serial")
	defer db.Close()
	store, err := dedupe.New(mysqldriver.New(db))
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
