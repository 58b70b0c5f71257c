package sqlonce_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// A transaction that meets a deadlock, a serialization failure or a busy
// database may have to run again: IsRetryable says when. The retry sees
// the committed first run.
func ExampleIsRetryable() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}

	handle := func(key string) (sqlonce.Result, error) {
		for {
			var res sqlonce.Result
			err := inTx(ctx, db, func(tx *sql.Tx) error {
				var err error
				res, err = store.Do(ctx, tx, dedupe.Request{Scope: "webhooks", Key: key},
					func(ctx context.Context) error {
						_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", key)
						return err
					})
				return err
			})
			if sqlonce.IsRetryable(err) {
				continue // inTx rolled back; run it again
			}
			return res, err
		}
	}
	for range 2 {
		res, err := handle("evt_123")
		if err != nil {
			panic(err)
		}
		fmt.Println(res)
	}
	// Output:
	// first run
	// already done
}

// tables are the business tables the examples write.
const tables = `
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
