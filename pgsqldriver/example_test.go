package pgsqldriver_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"; lib/pq's "postgres" works alike

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgsqldriver"
)

// A driver on a *sql.DB serves every strategy; the strategies take the
// *sql.Tx the caller already has (sqlx's, GORM's, bun's and ent's
// transactions all have one underneath).
func ExampleNew() {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	// A schema of the example's own, recreated on every run.
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS example_pgsqldriver CASCADE"); err != nil {
		panic(err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA example_pgsqldriver"); err != nil {
		panic(err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", dsn+sep+"search_path=example_pgsqldriver")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}

	drv, err := pgsqldriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		res, err := store.Do(ctx, tx, dedupe.Request{Scope: "jobs", Key: "nightly-2026-11-21"},
			func(ctx context.Context) error { return nil })
		if err != nil {
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

// sqlonce's tables in a schema of their own, named on the driver: every
// statement names them qualified, so the connection needs no search_path
// (a client behind PgBouncer cannot set one).
func ExampleWithSchema() {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS example_pgsqldriver_billing CASCADE"); err != nil {
		panic(err)
	}
	// Up creates the schema, then the tables and the version table in it.
	if err := migrations.Up(ctx, db, migrations.Postgres, migrations.WithSchema("example_pgsqldriver_billing")); err != nil {
		panic(err)
	}
	drv, err := pgsqldriver.New(db, pgsqldriver.WithSchema("example_pgsqldriver_billing"))
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	res, err := store.Run(ctx, dedupe.Request{Scope: "invoices", Key: "inv-7"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		return []byte("sent"), nil
	})
	if err != nil {
		panic(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM example_pgsqldriver_billing.sqlonce_keys").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println(res, "- keys in the schema:", n)
	// Output: first run - keys in the schema: 1
}
