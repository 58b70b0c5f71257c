package unique_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/unique"
)

// The client generated the order code; a retried request inserts nothing
// new, and the transaction goes on to commit its other writes.
func ExampleInserter_Insert() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	ins, err := unique.New(drv)
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			res, err := ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES ('ORD-2026-0001', 250)")
				return err
			})
			if err != nil {
				return err
			}
			fmt.Println(res)
			// The transaction is still usable after a duplicate, on every database.
			_, err = tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ('audit', 0)")
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	var orders, audits int
	if err := db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM ledger)").Scan(&orders, &audits); err != nil {
		panic(err)
	}
	fmt.Println("orders:", orders, "audit rows:", audits)
	// Output:
	// first run
	// already done
	// orders: 1 audit rows: 2
}

// tables are the business tables the examples write.
const tables = `
CREATE TABLE orders (
    id      INTEGER PRIMARY KEY,
    code    TEXT    NOT NULL,
    amount  INTEGER NOT NULL DEFAULT 0,
    status  TEXT    NOT NULL DEFAULT 'created',
    version INTEGER NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX orders_code_key ON orders (code);
CREATE TABLE ledger (
    id     INTEGER PRIMARY KEY,
    ref    TEXT    NOT NULL,
    amount INTEGER NOT NULL
);`

// openDB does what a program does once at start-up: it opens a SQLite
// database (here a new file, removed by done), installs sqlonce's tables
// with migrations.Up, creates the business tables and builds the driver.
// On PostgreSQL or MySQL only the handle and the driver differ: see
// pgxdriver, pgsqldriver and mysqldriver.
func openDB(tables string) (db *sql.DB, drv *sqlitedriver.Driver, done func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	db, err = modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	done = func() { db.Close(); os.RemoveAll(dir) }
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, tables); err != nil {
		panic(err)
	}
	drv, err = sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	return db, drv, done
}

// inTx runs fn in a transaction and commits it, or rolls it back if fn
// fails.
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
