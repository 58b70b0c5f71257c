package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// delivery stands in for a broker's message: an id the producer gave it,
// the same in every delivery, and the ack the consumer sends.
type delivery struct {
	id     string
	amount int64
}

func (d delivery) Ack() { fmt.Println("ack", d.id) }
func (d delivery) Nak() { fmt.Println("nak", d.id) }

// A consumer writes each payment message to the ledger. The broker
// delivers pay-1 twice (its first ack was lost) and pay-2 again after the
// first attempt failed: the ledger gets each payment once.
func Example() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	in, err := inbox.New(drv, "ledger-writer")
	if err != nil {
		panic(err)
	}
	failOnce := true
	for _, msg := range []delivery{{"pay-1", 100}, {"pay-1", 100}, {"pay-2", 250}, {"pay-2", 250}} {
		res, err := in.Handle(ctx, msg.id, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", msg.id, msg.amount); err != nil {
				return err
			}
			if msg.id == "pay-2" && failOnce {
				failOnce = false
				return errors.New("downstream check failed") // rolls the insert back
			}
			return nil
		})
		if err != nil {
			msg.Nak()
			continue
		}
		fmt.Print(res, ": ")
		msg.Ack() // after the commit, never before
	}

	var n, sum int64
	if err := db.QueryRowContext(ctx, "SELECT count(*), sum(amount) FROM ledger").Scan(&n, &sum); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n, "total:", sum)
	// Output:
	// first run: ack pay-1
	// already done: ack pay-1
	// nak pay-2
	// first run: ack pay-2
	// ledger rows: 2 total: 350
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
