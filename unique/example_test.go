package unique_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/unique"
)

// The client generated the order code; a retried request inserts nothing
// new, and the transaction goes on to commit its other writes.
func ExampleInserter_Insert() {
	ctx := context.Background()
	pool := exampledb.Postgres("unique")
	defer pool.Close()

	ins, err := unique.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := tx.Exec(ctx, "INSERT INTO orders (code, amount) VALUES ('ORD-2026-0001', 250)")
				return err
			})
			if err != nil {
				return err
			}
			fmt.Println(res)
			// Still usable after a duplicate, on PostgreSQL too.
			_, err = tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ('audit', 0)")
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	var orders, audits int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM ledger)").Scan(&orders, &audits); err != nil {
		panic(err)
	}
	fmt.Println("orders:", orders, "audit rows:", audits)
	// Output:
	// first run
	// already done
	// orders: 1 audit rows: 2
}

// A repeat gets the row the first call inserted.
func ExampleInsertOrGet() {
	ctx := context.Background()
	pool := exampledb.Postgres("unique_get")
	defer pool.Close()

	ins, err := unique.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, res, err := unique.InsertOrGet(ctx, ins, tx, "orders_code_key",
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('ORD-7') RETURNING id").Scan(&id)
					return id, err
				},
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRow(ctx, "SELECT id FROM orders WHERE code = 'ORD-7'").Scan(&id)
					return id, err
				})
			fmt.Println(res, "order", id)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run order 1
	// already done order 1
}
