package galera

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/unique"
)

// TestUniqueDuplicateThenBFAbort provokes, on a real multi-primary
// cluster, the shape measured through HAProxy: unique.Insert's insert
// meets a duplicate on node A, and before Insert rolls back to its
// savepoint a conflicting write committed on node B aborts A's
// transaction (Galera's brute-force abort), so that the rollback to the
// savepoint fails with 1213: "Error 1062 Duplicate entry" joined to
// "rollback to savepoint: Error 1213 Deadlock". Insert must not answer
// AlreadyDone, IsRetryable must say true whatever comes first, and the
// retry answers AlreadyDone with one order in the database.
func TestUniqueDuplicateThenBFAbort(t *testing.T) {
	c := galera.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)
	a, b := dbs[0], dbs[1]
	const code = "g-dup"
	_, err := a.Pool().OrderInsert(ctx, code, code, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.Pool().OrderInsert(ctx, "g-x", "g-x", 1)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := unique.New(a.Driver())
	if err != nil {
		t.Fatal(err)
	}

	tx, err := a.Begin(ctx, harness.Default)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Rollback(ctx, tx) }()
	if _, err := a.Tx(tx).OrderAddAmount(ctx, x, 1, 1); err != nil { // A's transaction writes order x
		t.Fatal(err)
	}
	res, err := ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
		_, dupErr := a.Tx(tx).OrderInsert(ctx, code, code, 1)
		if dupErr == nil {
			return errors.New("no duplicate")
		}
		// Node B's write aborts A's transaction, which holds x.
		if err := abortHolder(ctx, a, x, b, dbs[2]); err != nil {
			return errors.Join(dupErr, err)
		}
		return dupErr
	})
	t.Logf("Insert: %v, %v", res, err)
	if err == nil || res.Outcome != 0 {
		t.Fatalf("got %v, %v; want an error, never AlreadyDone, for a transaction the cluster aborted", res, err)
	}
	if cl := driver.Classify(err); !cl.Has(driver.Unique) || !cl.Has(driver.TxRolledBack) {
		t.Fatalf("%v is not the duplicate joined to the abort (class %b)", err, cl)
	}
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false, want true", err)
	}
	_ = a.Rollback(ctx, tx)

	// The caller's retry: the order exists.
	err = harness.WithTx(ctx, a, harness.Default, func(tx2 *sql.Tx) error {
		res, err = ins.Insert(ctx, tx2, "orders_code_key", func(ctx context.Context) error {
			_, err := a.Tx(tx2).OrderInsert(ctx, code, code, 1)
			return err
		})
		return err
	})
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("retry: got %v, %v; want AlreadyDone", res, err)
	}
	if n, err := a.Pool().OrderCountByCode(ctx, code); err != nil || n != 1 {
		t.Fatalf("%d orders with code %s (%v), want 1", n, code, err)
	}
}

// TestUniqueInsertOneDuplicateThenBFAbort is the same shape for
// InsertOne, which takes no savepoint on MySQL: the duplicate on node A is
// the statement's own failure, rolled back alone, so InsertOne answers
// AlreadyDone at once (the row it met is committed); the abort that B's
// write causes then fails A's COMMIT with a retryable error, and the
// caller's retry answers AlreadyDone again, with one order in the database.
func TestUniqueInsertOneDuplicateThenBFAbort(t *testing.T) {
	c := galera.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)
	a, b := dbs[0], dbs[1]
	const code = "g-dup-one"
	if _, err := a.Pool().OrderInsert(ctx, code, code, 1); err != nil {
		t.Fatal(err)
	}
	x, err := a.Pool().OrderInsert(ctx, "g-x-one", "g-x-one", 1)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := unique.New(a.Driver())
	if err != nil {
		t.Fatal(err)
	}

	tx, err := a.Begin(ctx, harness.Default)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Rollback(ctx, tx) }()
	if _, err := a.Tx(tx).OrderAddAmount(ctx, x, 1, 1); err != nil { // A's transaction writes order x
		t.Fatal(err)
	}
	res, err := ins.InsertOne(ctx, tx, "orders_code_key", func(ctx context.Context) error {
		_, err := a.Tx(tx).OrderInsert(ctx, code, code, 1)
		return err
	})
	t.Logf("InsertOne: %v, %v", res, err)
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("got %v, %v; want AlreadyDone", res, err)
	}
	// Node B's write aborts A's transaction, which holds x.
	if err := abortHolder(ctx, a, x, b, dbs[2]); err != nil {
		t.Fatal(err)
	}
	err = a.Commit(ctx, tx)
	t.Logf("COMMIT: %v", err)
	if err == nil || !sqlonce.IsRetryable(err) {
		t.Fatalf("COMMIT of the aborted transaction: %v, want a retryable error", err)
	}

	// The caller's retry: the order exists.
	err = harness.WithTx(ctx, a, harness.Default, func(tx2 *sql.Tx) error {
		res, err = ins.InsertOne(ctx, tx2, "orders_code_key", func(ctx context.Context) error {
			_, err := a.Tx(tx2).OrderInsert(ctx, code, code, 1)
			return err
		})
		return err
	})
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("retry: got %v, %v; want AlreadyDone", res, err)
	}
	if n, err := a.Pool().OrderCountByCode(ctx, code); err != nil || n != 1 {
		t.Fatalf("%d orders with code %s (%v), want 1", n, code, err)
	}
}
