package statemachine_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/statemachine"
)

type Status string

const (
	Created   Status = "created"
	Paid      Status = "paid"
	Shipped   Status = "shipped"
	Cancelled Status = "cancelled"
)

var orderStates = statemachine.Must(statemachine.New(
	statemachine.Edge(Created, Paid),
	statemachine.Edge(Paid, Shipped),
	statemachine.Edge(Created, Cancelled),
))

// A payment callback arrives three times, the last after the order shipped;
// a cancellation arrives after payment.
func ExampleMachine_Transition() {
	ctx := context.Background()
	db, done := openDB(tables)
	defer done()

	var id int64
	if err := db.QueryRowContext(ctx, "INSERT INTO orders (code) VALUES ('S-1') RETURNING id").Scan(&id); err != nil {
		panic(err)
	}
	move := func(from, to Status) {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			res, err := orderStates.Transition(ctx, from, to,
				func(ctx context.Context) (int64, error) {
					r, err := tx.ExecContext(ctx, "UPDATE orders SET status = ? WHERE id = ? AND status = ?", to, id, from)
					if err != nil {
						return 0, err
					}
					return r.RowsAffected()
				},
				func(ctx context.Context) (Status, error) {
					var s Status
					err := tx.QueryRowContext(ctx, "SELECT status FROM orders WHERE id = ?", id).Scan(&s)
					return s, err
				})
			if err != nil {
				return err
			}
			fmt.Printf("%s -> %s: %v\n", from, to, res)
			return nil
		})
		var terr *statemachine.TransitionError[Status]
		if errors.As(err, &terr) {
			fmt.Printf("%s -> %s: refused, order is %s (%v)\n", from, to, terr.Current, errors.Is(err, sqlonce.ErrInvalidTransition))
		} else if err != nil {
			panic(err)
		}
	}
	move(Created, Paid)
	move(Created, Paid)
	move(Paid, Shipped)
	move(Created, Paid)
	move(Created, Cancelled)
	// Output:
	// created -> paid: first run
	// created -> paid: already done
	// paid -> shipped: first run
	// created -> paid: already done
	// created -> cancelled: refused, order is shipped (true)
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
