package token_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/token"
)

// A checkout form carries a one-time token. The user double-clicks
// "Pay": the first submit consumes the token together with the order
// insert, the second finds it consumed and inserts nothing.
func Example() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	tokens, err := token.New(drv)
	if err != nil {
		panic(err)
	}
	scope := "checkout:session-81f2"
	tok, err := tokens.Issue(ctx, scope) // rendered into the form
	if err != nil {
		panic(err)
	}

	submit := func(formToken string) {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			res, err := tokens.Consume(ctx, tx, scope, formToken)
			if err != nil {
				return err
			}
			fmt.Println("submit:", res)
			if res.AlreadyDone() {
				return nil
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES ('ord-1', 4200)")
			return err
		})
		if err != nil {
			fmt.Println("refused:", errors.Is(err, token.ErrUnknown))
		}
	}
	submit(tok)
	submit(tok)
	submit("forged-" + tok[7:])

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// submit: first run
	// submit: already done
	// refused: true
	// orders: 1
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
