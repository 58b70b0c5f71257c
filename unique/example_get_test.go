package unique_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlonce/sqlonce/unique"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up; inTx runs a function in a transaction.

// A repeat gets the row the first call inserted.
func ExampleInsertOrGet() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	ins, err := unique.New(drv)
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			id, res, err := unique.InsertOrGet(ctx, ins, tx, "orders_code_key",
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRowContext(ctx, "INSERT INTO orders (code) VALUES ('ORD-7') RETURNING id").Scan(&id)
					return id, err
				},
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRowContext(ctx, "SELECT id FROM orders WHERE code = 'ORD-7'").Scan(&id)
					return id, err
				})
			fmt.Println(res, "order", id)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run order 1
	// already done order 1
}

// The insert is one statement, as a sqlc-generated call is: on MySQL,
// MariaDB and SQLite InsertOne runs it without a savepoint, in the round
// trips of the bare transaction, and InsertOneOrGet reads the existing row
// on a repeat.
func ExampleInsertOneOrGet() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	ins, err := unique.New(drv)
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		id, res, err := unique.InsertOneOrGet(ctx, ins, tx, "orders_code_key",
			func(ctx context.Context) (int64, error) {
				r, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", "ORD-9", 250)
				if err != nil {
					return 0, err
				}
				return r.LastInsertId()
			},
			func(ctx context.Context) (id int64, err error) {
				// On MySQL/MariaDB under REPEATABLE READ, read with
				// LOCK IN SHARE MODE: a plain SELECT reads the snapshot.
				err = tx.QueryRowContext(ctx, "SELECT id FROM orders WHERE code = ?", "ORD-9").Scan(&id)
				return id, err
			})
		if err != nil {
			_ = tx.Rollback()
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(res, "order", id)
	}
	// Output:
	// first run order 1
	// already done order 1
}

// An INSERT that cannot fail on its key (PostgreSQL, SQLite) needs no
// savepoint: ON CONFLICT (code) DO NOTHING inserts no row on a repeat, and Inserted
// judges the affected-rows count, as sqlc's :execrows returns it. A
// duplicate on another unique constraint is still an error.
func ExampleInserted() {
	ctx := context.Background()
	db, _, done := openDB(tables)
	defer done()

	for range 2 {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			tag, err := tx.ExecContext(ctx,
				"INSERT INTO orders (code, amount) VALUES (?, ?) ON CONFLICT (code) DO NOTHING", "ORD-42", 250)
			if err != nil {
				return err
			}
			affected, err := tag.RowsAffected()
			if err != nil {
				return err
			}
			res, err := unique.Inserted(ctx, affected)
			if err != nil {
				return err
			}
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT id FROM orders WHERE code = ?", "ORD-42").Scan(&id); err != nil {
				return err
			}
			fmt.Println(res, "order", id)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run order 1
	// already done order 1
}
