package sqlitedriver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// Open a database file configured for sqlonce (here with modernc.org/sqlite),
// install the tables, build the driver on it, and
// run a request twice: the work runs once, the repeat replays its answer.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	db, err := modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		panic(err)
	}

	drv, err := sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: Open set it up
		if err != nil {
			panic(err)
		}
		res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "payments", Key: "order-42"},
			func(ctx context.Context) ([]byte, error) {
				r, err := tx.ExecContext(ctx, "INSERT INTO payments (amount) VALUES (1250)")
				if err != nil {
					return nil, err
				}
				id, err := r.LastInsertId()
				return fmt.Appendf(nil, "payment %d", id), err
			})
		if err != nil {
			panic(err) // roll back; retry when sqlonce.IsRetryable(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Printf("%v: %s\n", res, res.Response)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM payments").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("payments:", n)
	// Output:
	// first run: payment 1
	// already done: payment 1
	// payments: 1
}
