package sqlonce_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// Under REPEATABLE READ or SERIALIZABLE a transaction may have to run
// again: IsRetryable says when. The retry sees the committed first run.
func ExampleIsRetryable() {
	ctx := context.Background()
	pool := exampledb.Postgres("root")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}

	handle := func(key string) (sqlonce.Result, error) {
		for {
			var res sqlonce.Result
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
				var err error
				res, err = store.Do(ctx, tx, dedupe.Request{Scope: "webhooks", Key: key},
					func(ctx context.Context) error {
						_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, 1)", key)
						return err
					})
				return err
			})
			if sqlonce.IsRetryable(err) {
				continue // roll back happened in BeginTxFunc; run it again
			}
			return res, err
		}
	}
	for range 2 {
		res, err := handle("evt_123")
		if err != nil {
			panic(err)
		}
		fmt.Println(res)
	}
	// Output:
	// first run
	// already done
}
