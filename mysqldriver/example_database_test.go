package mysqldriver_test

import (
	"context"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
)

// mariadb, in example_test.go, sets the database up as a program does at
// start-up.

// sqlonce's tables in a database of their own, apart from the one the
// connection defaults to: every statement names them qualified.
func ExampleWithDatabase() {
	ctx := context.Background()
	db := mariadb("mysqldriver_db") // the connection's database has sqlonce's tables too
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS example_billing"); err != nil {
		panic(err)
	}
	// Up creates the database, then the tables and the version table in it.
	if err := migrations.Up(ctx, db, migrations.MySQL, migrations.WithSchema("example_billing")); err != nil {
		panic(err)
	}
	drv, err := mysqldriver.New(db, mysqldriver.WithDatabase("example_billing"))
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
	if _, err := store.Do(ctx, tx, dedupe.Request{Scope: "invoices", Key: "inv-7"},
		func(ctx context.Context) error { return nil }); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	var billing, own int
	if err := db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM example_billing.sqlonce_keys), (SELECT count(*) FROM sqlonce_keys)").Scan(&billing, &own); err != nil {
		panic(err)
	}
	fmt.Println("keys in example_billing:", billing, "in the connection's database:", own)
	// Output: keys in example_billing: 1 in the connection's database: 0
}
