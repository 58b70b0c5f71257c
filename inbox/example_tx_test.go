package inbox_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqlonce/sqlonce/inbox"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up.

// A consumer that runs its own transactions uses HandleTx, commits, then
// acks.
func ExampleInbox_HandleTx() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	in, err := inbox.New(drv, "order-projector")
	if err != nil {
		panic(err)
	}
	apply := func(msg delivery) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := in.HandleTx(ctx, tx, msg.id, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", msg.id, msg.amount)
			return err
		})
		if err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		fmt.Print(res, ": ")
		msg.Ack()
		return nil
	}
	for _, msg := range []delivery{{"order-created-7", 4200}, {"order-created-7", 4200}} {
		if err := apply(msg); err != nil {
			panic(err)
		}
	}
	// Output:
	// first run: ack order-created-7
	// already done: ack order-created-7
}

// A consumer that pulls messages in batches applies each batch in one
// transaction: the ids are claimed in one statement, and fn gets only the
// ids not applied before. pay-1 was applied by an earlier batch whose ack
// was lost.
func ExampleInbox_HandleBatch() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	in, err := inbox.New(drv, "ledger-writer")
	if err != nil {
		panic(err)
	}
	amounts := map[string]int64{"pay-1": 100, "pay-2": 250, "pay-3": 50}
	apply := func(ctx context.Context, tx *sql.Tx, fresh []string) error {
		for _, id := range fresh {
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", id, amounts[id]); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := in.HandleBatch(ctx, []string{"pay-1"}, apply); err != nil {
		panic(err)
	}
	batch := []string{"pay-1", "pay-2", "pay-3"}
	res, err := in.HandleBatch(ctx, batch, apply)
	if err != nil {
		panic(err) // nak the batch: nothing of it was applied
	}
	for i, r := range res {
		fmt.Println(batch[i], r) // ack each message, after the commit
	}

	var n, sum int64
	if err := db.QueryRowContext(ctx, "SELECT count(*), sum(amount) FROM ledger").Scan(&n, &sum); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n, "total:", sum)
	// Output:
	// pay-1 already done
	// pay-2 first run
	// pay-3 first run
	// ledger rows: 3 total: 400
}
