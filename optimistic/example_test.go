package optimistic_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// A relative update (amount + 100) guarded by the version column: the
// client read version 1 and retries the same request twice.
func ExampleUpdate() {
	ctx := context.Background()
	db, done := openDB(tables)
	defer done()

	var id int64
	if err := db.QueryRowContext(ctx, "INSERT INTO orders (code) VALUES ('O-1') RETURNING id").Scan(&id); err != nil {
		panic(err)
	}
	const readVersion = 1
	for range 2 {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			tag, err := tx.ExecContext(ctx,
				"UPDATE orders SET amount = amount + 100, version = version + 1 WHERE id = ? AND version = ?",
				id, readVersion)
			if err != nil {
				return err
			}
			affected, err := tag.RowsAffected()
			if err != nil {
				return err
			}
			res, err := optimistic.Update(ctx, affected, int64(readVersion),
				func(ctx context.Context) (int64, error) {
					var v int64
					err := tx.QueryRowContext(ctx, "SELECT version FROM orders WHERE id = ?", id).Scan(&v)
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
	if err := db.QueryRowContext(ctx, "SELECT amount FROM orders WHERE id = ?", id).Scan(&amount); err != nil {
		panic(err)
	}
	fmt.Println("amount:", amount)
	// Output:
	// first run
	// already done
	// amount: 100
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
CREATE UNIQUE INDEX orders_code_key ON orders (code);`

// openDB does what a program does once at start-up: it opens a SQLite
// database (here a new file, removed by done), installs sqlonce's tables
// with migrations.Up, and creates the business tables.
// On PostgreSQL or MySQL only the handle differs.
func openDB(tables string) (db *sql.DB, done func()) {
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
	return db, done
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
