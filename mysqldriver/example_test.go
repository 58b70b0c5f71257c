package mysqldriver_test

import (
	"context"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/mysqldriver"
)

// A driver on a *sql.DB serves every strategy; the strategies take the
// *sql.Tx the caller already has.
func ExampleNew() {
	ctx := context.Background()
	db := exampledb.MySQL("mysqldriver")
	defer db.Close()

	store, err := dedupe.New(mysqldriver.New(db))
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
