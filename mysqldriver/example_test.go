package mysqldriver_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
)

// A driver on a *sql.DB serves every strategy; the strategies take the
// *sql.Tx the caller already has.
func ExampleNew() {
	ctx := context.Background()
	db := mariadb("mysqldriver")
	defer db.Close()

	drv, err := mysqldriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	res, err := store.Do(ctx, tx, dedupe.Request{Scope: "jobs", Key: "nightly-2026-11-21"},
		func(ctx context.Context) error { return nil })
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println(res)
	// Output: first run
}

// mariadb does what a program does once at start-up: it connects to
// MySQL or MariaDB (SQLONCE_MYSQL_DSN, or the local default below),
// installs sqlonce's tables with migrations.Up.
// Each example works in a database of its own, emptied on every run, so
// that its output is the same each time.
func mariadb(name string) *sql.DB {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	cfg.DBName = "example_" + name
	for _, q := range []string{"DROP DATABASE IF EXISTS " + cfg.DBName, "CREATE DATABASE " + cfg.DBName} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		panic(err)
	}
	return db
}
