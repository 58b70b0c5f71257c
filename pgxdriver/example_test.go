package pgxdriver_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// A driver on a pgxpool.Pool serves every strategy; the strategies take the
// pgx.Tx the caller already has.
func ExampleNew() {
	ctx := context.Background()
	pool := postgres("pgxdriver")
	defer pool.Close()

	drv, err := pgxdriver.New(pool)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
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

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up.
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
	return pool
}
