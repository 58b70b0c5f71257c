package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// An order service writes each order and its "order placed" message in
// one transaction. The second order's transaction rolls back: its
// message is never published. A relay publishes the others, in order,
// once each transaction committed.
func Example() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	store, err := outbox.New(drv)
	if err != nil {
		panic(err)
	}
	placeOrder := func(code string, amount int64, fail bool) error {
		return inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", code, amount); err != nil {
				return err
			}
			_, err := store.Enqueue(ctx, tx, outbox.Message{
				ID:      "order-placed:" + code, // the consumer's inbox key
				Topic:   "orders.placed",
				Key:     "customer-7", // this customer's messages stay in order
				Payload: fmt.Appendf(nil, `{"code":%q,"amount":%d}`, code, amount),
				Headers: map[string]string{"content-type": "application/json"},
			})
			if err != nil {
				return err
			}
			if fail {
				return errors.New("payment declined") // rolls back the order and its message
			}
			return nil
		})
	}
	for _, o := range []struct {
		code   string
		amount int64
		fail   bool
	}{{"ord-1", 4200, false}, {"ord-2", 990, true}, {"ord-3", 1500, false}} {
		if err := placeOrder(o.code, o.amount, o.fail); err != nil {
			fmt.Println(o.code, "not placed:", err)
		}
	}

	// The relay, as a program runs it in a goroutine of its own; here it
	// stops once it published the two messages.
	ctx, cancel := context.WithCancel(ctx)
	published := 0
	publisher := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		fmt.Printf("publish %s %s %s\n", m.Topic, m.ID, m.Payload) // a broker's publish, confirmed
		if published++; published == 2 {
			cancel()
		}
		return nil
	})
	err = store.Relay(ctx, publisher, outbox.WithPollInterval(10*time.Millisecond))
	fmt.Println("relay:", err)

	st, err := store.Stats(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending %d, sent %d\n", st.Pending, st.Sent)
	// Output:
	// ord-2 not placed: payment declined
	// publish orders.placed order-placed:ord-1 {"code":"ord-1","amount":4200}
	// publish orders.placed order-placed:ord-3 {"code":"ord-3","amount":1500}
	// relay: context canceled
	// pending 0, sent 2
}

// tables are the business tables the examples write.
const tables = `
CREATE TABLE orders (
    id     INTEGER PRIMARY KEY,
    code   TEXT    NOT NULL UNIQUE,
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
