package optimistic_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/optimistic"
)

// A relative update (amount + 100) guarded by the version column: the
// client read version 1 and retries the same request twice.
func ExampleUpdate() {
	ctx := context.Background()
	pool := exampledb.Postgres("optimistic")
	defer pool.Close()

	var id int64
	if err := pool.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('O-1') RETURNING id").Scan(&id); err != nil {
		panic(err)
	}
	const readVersion = 1
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx,
				"UPDATE orders SET amount = amount + 100, version = version + 1 WHERE id = $1 AND version = $2",
				id, readVersion)
			if err != nil {
				return err
			}
			res, err := optimistic.Update(ctx, tag.RowsAffected(), int64(readVersion),
				func(ctx context.Context) (int64, error) {
					var v int64
					err := tx.QueryRow(ctx, "SELECT version FROM orders WHERE id = $1", id).Scan(&v)
					return v, err
				})
			fmt.Println(res)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	var amount int64
	if err := pool.QueryRow(ctx, "SELECT amount FROM orders WHERE id = $1", id).Scan(&amount); err != nil {
		panic(err)
	}
	fmt.Println("amount:", amount)
	// Output:
	// first run
	// already done
	// amount: 100
}
