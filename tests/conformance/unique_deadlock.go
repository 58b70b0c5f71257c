package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runUniqueDeadlock: two transactions insert codes a and b in opposite
// orders: one is the deadlock victim. The form reports a retryable error,
// never AlreadyDone, although MySQL has rolled the victim's whole
// transaction back (and a savepoint with it); the other's insert then
// goes through. For a rows form the error is the statement's, which the
// caller checks before Inserted.
func runUniqueDeadlock[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	ctx := ctxT(t)
	db := f(t, 2)
	skipOnSQLite(t, db, sqliteNoRowLocks)
	form.noConflictTarget(t, db)
	ins := newInserter(t, db)
	var txs [2]TTx
	for i := range txs {
		tx, err := db.Begin(ctx, harness.Default)
		must(t, err)
		txs[i] = tx
		defer func() { _ = db.Rollback(ctx, tx) }()
	}
	codes := [2]string{"u-dl-a", "u-dl-b"}
	insert := func(i int, code string) (sqlonce.Result, error) {
		var stmtErr error
		return form.order(ctx, ins, txs[i], db.Tx(txs[i]), codeKey, orderOf(code), &stmtErr)
	}
	for i := range txs {
		res, err := insert(i, codes[i])
		must(t, err)
		if !res.FirstRun() {
			t.Fatalf("tx %d: %v", i, res)
		}
	}
	var results [2]sqlonce.Result
	errs := race(2, func(i int) error {
		var err error
		results[i], err = insert(i, codes[1-i])
		if sqlonce.IsRetryable(err) {
			// What the caller does with a retryable error. On PostgreSQL
			// a savepoint left the victim's transaction open, holding its
			// first row, which the other waits for.
			_ = db.Rollback(ctx, txs[i])
		}
		return err
	})
	victim := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if !results[i].FirstRun() {
				t.Fatalf("tx %d: %v", i, results[i])
			}
		case sqlonce.IsRetryable(err) && results[i].Outcome == 0:
			victim = i
		default:
			t.Fatalf("tx %d: %v, %v", i, results[i], err)
		}
	}
	if victim < 0 {
		t.Fatalf("no deadlock victim: %v", errs)
	}
	t.Logf("victim: %v", errs[victim])
	must(t, db.Commit(ctx, txs[1-victim]))
	for _, code := range codes {
		wantOrders(t, ctx, db, code, 1)
	}
}

// unDuplicateThenDeadlock: insert meets the duplicate, then its
// transaction is chosen as a deadlock victim before Insert rolls back to
// its savepoint (InsertOne, which takes none on MySQL, gets the two
// errors joined by the function itself: an insert that breaks its
// one-statement promise, or wraps what it got). The server has rolled the whole transaction back (and
// the savepoint with it), so the error holds a duplicate first and a
// deadlock after it (measured through a multi-primary MariaDB cluster:
// "Error 1062 Duplicate entry" joined to "rollback to savepoint: Error
// 1213 Deadlock"). Insert must not answer AlreadyDone, and IsRetryable
// must say true whatever error comes first; the caller's retry then
// answers AlreadyDone, with one order in the database.
func unDuplicateThenDeadlock[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	ctx := ctxT(t)
	db := f(t, 4)
	skipOnSQLite(t, db, sqliteNoRowLocks)
	if db.Dialect() == "postgres" {
		t.Skip("PostgreSQL aborts the transaction at the duplicate: insert cannot go on to deadlock before the rollback to the savepoint")
	}
	ins := newInserter(t, db)
	const code = "u-dup-dl"
	_, err := insertOrder(db.Pool(), code)(ctx)
	must(t, err)
	id1, err := db.Pool().OrderInsert(ctx, "u-dl-1", "u-dl-1", 1)
	must(t, err)
	id2, err := db.Pool().OrderInsert(ctx, "u-dl-2", "u-dl-2", 1)
	must(t, err)

	// other locks order 2, the victim order 1, then each wants the other's.
	// other writes many rows first: MySQL rolls back the lighter
	// transaction.
	other, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, other) }()
	for i := range 50 {
		must(t, db.Tx(other).LedgerInsert(ctx, fmt.Sprintf("u-weight-%d", i), 1))
	}
	_, err = db.Tx(other).OrderAddAmount(ctx, id2, 1, 1)
	must(t, err)

	victim, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, victim) }()
	_, err = db.Tx(victim).OrderAddAmount(ctx, id1, 1, 1)
	must(t, err)
	victimID, err := db.ConnID(ctx, victim)
	must(t, err)

	type outcome struct {
		res sqlonce.Result
		err error
	}
	waiting := make(chan struct{})
	victimDone := make(chan outcome, 1)
	go func() {
		b := db.Tx(victim)
		res, err := form.run(ctx, ins, victim, codeKey, func(ctx context.Context) error {
			_, dupErr := insertOrder(b, code)(ctx)
			if dupErr == nil {
				return errors.New("no duplicate")
			}
			close(waiting)
			_, dlErr := b.OrderAddAmount(ctx, id2, 1, 1) // waits for other
			if dlErr == nil {
				return errors.New("no deadlock")
			}
			return errors.Join(dupErr, dlErr)
		})
		victimDone <- outcome{res, err}
	}()
	select {
	case <-waiting:
	case o := <-victimDone:
		t.Fatalf("victim: %v, %v", o.res, o.err)
	}
	must(t, harness.WaitLockWait(ctx, db, victimID)) // the victim waits first
	otherDone := make(chan error, 1)
	go func() {
		_, err := db.Tx(other).OrderAddAmount(ctx, id1, 1, 1)
		otherDone <- err
	}()

	var o outcome
	select {
	case o = <-victimDone:
	case <-time.After(30 * time.Second):
		t.Fatal("no deadlock victim after 30s")
	}
	t.Logf("victim: %v", o.err)
	if o.err == nil || o.res.Outcome != 0 {
		t.Fatalf("victim: got %v, %v; want an error, never AlreadyDone, for a transaction the server rolled back", o.res, o.err)
	}
	if c := driver.Classify(o.err); !c.Has(driver.Unique) || !c.Has(driver.TxRolledBack) {
		t.Fatalf("victim: %v is not the duplicate joined to the deadlock (class %b)", o.err, c)
	}
	if !sqlonce.IsRetryable(o.err) {
		t.Fatalf("IsRetryable(%v) = false, want true: the server rolled the transaction back", o.err)
	}
	must(t, db.Rollback(ctx, victim))
	must(t, <-otherDone)
	must(t, db.Rollback(ctx, other))

	// The caller retries, as IsRetryable tells it to: the order exists.
	var res sqlonce.Result
	must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		b := db.Tx(tx)
		var err error
		res, err = form.run(ctx, ins, tx, codeKey, func(ctx context.Context) error {
			_, err := insertOrder(b, code)(ctx)
			return err
		})
		return err
	}))
	if !res.AlreadyDone() {
		t.Fatalf("retry: got %v, want AlreadyDone", res)
	}
	wantOrders(t, ctx, db, code, 1)
}
