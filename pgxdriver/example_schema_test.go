package pgxdriver_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// postgres, in example_test.go, sets the database up as a program does at
// start-up.

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

	drv, err := pgxdriver.New(pool, pgxdriver.WithSchema("example_billing"))
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
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
