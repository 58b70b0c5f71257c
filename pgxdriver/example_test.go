package pgxdriver_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// A driver on a pgxpool.Pool serves every strategy; the strategies take the
// pgx.Tx the caller already has.
func ExampleNew() {
	ctx := context.Background()
	pool := exampledb.Postgres("pgxdriver")
	defer pool.Close()

	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := store.Do(ctx, tx, dedupe.Request{Scope: "jobs", Key: "nightly-2026-11-21"},
			func(ctx context.Context) error { return nil })
		fmt.Println(res)
		return err
	})
	if err != nil {
		panic(err)
	}
	// Output: first run
}
