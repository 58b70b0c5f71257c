package sqlonce_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// Under REPEATABLE READ or SERIALIZABLE a transaction may have to run
// again: IsRetryable says when. The retry sees the committed first run.
func ExampleIsRetryable() {
	ctx := context.Background()
	pool := postgres("root")
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

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up and creates the business tables.
// Each example works in a schema of its own, emptied on every run, so that
// its output is the same each time.
func postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	schema := "example_" + name
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	// sqlonce's tables: goose runs on database/sql.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	// The business tables the examples write.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE ledger (
		    id     bigserial PRIMARY KEY,
		    ref    text   NOT NULL,
		    amount bigint NOT NULL
		)`); err != nil {
		panic(err)
	}
	return pool
}
