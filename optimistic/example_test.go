package optimistic_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/optimistic"
)

// A relative update (amount + 100) guarded by the version column: the
// client read version 1 and retries the same request twice.
func ExampleUpdate() {
	ctx := context.Background()
	pool := postgres("optimistic")
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
		CREATE TABLE orders (
		    id      bigserial PRIMARY KEY,
		    code    text   NOT NULL CONSTRAINT orders_code_key UNIQUE,
		    amount  bigint NOT NULL DEFAULT 0,
		    status  text   NOT NULL DEFAULT 'created',
		    version bigint NOT NULL DEFAULT 1
		)`); err != nil {
		panic(err)
	}
	return pool
}
