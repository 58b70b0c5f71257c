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

// Two services share a database, each with sqlonce's tables in a schema
// of its own: every statement names its tables qualified, so it needs no
// search_path, which a client behind PgBouncer cannot set.
func ExampleWithSchema() {
	ctx := context.Background()
	pool := postgres("pgxdriver_schema") // its search_path has sqlonce's tables too
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_billing CASCADE"); err != nil {
		panic(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	// Up creates the schema, then the tables and the version table in it.
	if err := migrations.Up(ctx, db, migrations.Postgres, migrations.WithSchema("example_billing")); err != nil {
		panic(err)
	}

	store, err := dedupe.New(pgxdriver.New(pool, pgxdriver.WithSchema("example_billing")))
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.Do(ctx, tx, dedupe.Request{Scope: "invoices", Key: "inv-7"},
			func(ctx context.Context) error { return nil })
		return err
	})
	if err != nil {
		panic(err)
	}
	var billing, searchPath int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM example_billing.sqlonce_keys), (SELECT count(*) FROM sqlonce_keys)").Scan(&billing, &searchPath); err != nil {
		panic(err)
	}
	fmt.Println("keys in example_billing:", billing, "in the search_path's schema:", searchPath)
	// Output: keys in example_billing: 1 in the search_path's schema: 0
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
