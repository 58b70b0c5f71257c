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

	store, err := dedupe.New(pgsqldriver.New(db))
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
