package checker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// opaque reports an error the way much application code does: as text.
func opaque(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("update order: %v", err)
}

func transparent(err error) error { return err }

func TestUnclaimAfterDeadlockPostgres(t *testing.T) {
	unclaimAfterDeadlock(t, harness.Postgres(t, 8), transparent)
}

func TestUnclaimAfterDeadlockMySQL(t *testing.T) {
	unclaimAfterDeadlock(t, harness.MySQL(t, 8), transparent)
}

func TestUnclaimAfterOpaqueDeadlockPostgres(t *testing.T) {
	unclaimAfterDeadlock(t, harness.Postgres(t, 8), opaque)
}

func TestUnclaimAfterOpaqueDeadlockMySQL(t *testing.T) {
	db := harness.MySQL(t, 8)
	unclaimAfterDeadlock(t, db, opaque)
}

// unclaimAfterDeadlock: A claims key k; B, holding a row, claims k and
// waits; A's work then updates B's row. The deadlock makes A the victim (B
// has written more, and on PostgreSQL B's deadlock check is put off), B
// takes k over and commits. Whatever A's Do does after its
// transaction died must not touch B's marker: k must stay done, and a
// repeat must be AlreadyDone with B's effect the only one.
// wrap is how fn reports the deadlock.
func unclaimAfterDeadlock[TTx any](t *testing.T, db harness.DB[TTx], wrap func(error) error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := dedupe.New(db.Driver())
	if err != nil {
		t.Fatal(err)
	}
	orderID, err := db.Pool().OrderInsert(ctx, "held", "held", 0)
	if err != nil {
		t.Fatal(err)
	}
	const key = "k"
	req := dedupe.Request{Scope: "bug", Key: key}
	work := func(tx TTx) func(ctx context.Context) error {
		return func(ctx context.Context) error { return db.Tx(tx).LedgerInsert(ctx, key, 1) }
	}

	txB, err := db.Begin(ctx, harness.ReadCommitted)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Rollback(ctx, txB)
	// B waits first, A closes the cycle. PostgreSQL aborts the waiter
	// whose deadlock check (deadlock_timeout after it began to wait) finds
	// the cycle: B's is put off for a minute, so that A's finds it however
	// late a loaded machine runs A's statement.
	if db.Dialect() == "postgres" {
		if err := db.TxExec(ctx, txB, "SET LOCAL deadlock_timeout = '60s'"); err != nil {
			t.Fatal(err)
		}
	}
	idB, err := db.ConnID(ctx, txB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Tx(txB).OrderSetStatus(ctx, orderID, "created", "held"); err != nil {
		t.Fatal(err)
	}
	// Weight: InnoDB rolls back the transaction that wrote less.
	for i := range 20 {
		if err := db.Tx(txB).LedgerInsert(ctx, fmt.Sprintf("weight-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}

	aClaimed := make(chan struct{})
	bWaits := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		txA, err := db.Begin(ctx, harness.ReadCommitted)
		if err != nil {
			close(aClaimed)
			aDone <- err
			return
		}
		_, err = store.Do(ctx, txA, req, func(ctx context.Context) error {
			if err := work(txA)(ctx); err != nil {
				return err
			}
			close(aClaimed)
			select {
			case <-bWaits:
			case <-ctx.Done():
				return ctx.Err()
			}
			// Blocks on B's row lock: the deadlock.
			_, err := db.Tx(txA).OrderSetStatus(ctx, orderID, "created", "paid")
			return wrap(err)
		})
		_ = db.Rollback(ctx, txA)
		aDone <- err
	}()
	<-aClaimed
	type answer struct {
		res sqlonce.Result
		err error
	}
	bDone := make(chan answer, 1)
	go func() {
		res, err := store.Do(ctx, txB, req, work(txB)) // waits for A's claim
		bDone <- answer{res, err}
	}()
	// B blocks on A's claim before A closes the cycle (a fixed pause
	// did that on a quiet machine only).
	if err := harness.WaitLockWait(ctx, db, idB); err != nil {
		t.Fatal(err)
	}
	close(bWaits)
	b := <-bDone
	resB, errB := b.res, b.err
	if errB != nil {
		t.Fatalf("B was chosen as the deadlock victim (%v); the case needs A to be", errB)
	}
	if err := db.Commit(ctx, txB); err != nil {
		t.Fatal(err)
	}
	errA := <-aDone
	if errA == nil || !strings.Contains(errA.Error(), "eadlock") {
		t.Fatalf("A: want a deadlock, got %v", errA)
	}
	if !resB.FirstRun() {
		t.Fatalf("B: %v, want first run", resB)
	}

	if _, ok, err := db.Key(ctx, "bug", key); err != nil || !ok {
		t.Errorf("B's marker for %q is gone after A's Do gave up (err %v)", key, err)
	}
	var again sqlonce.Result
	err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
		var err error
		again, err = store.Do(ctx, tx, req, work(tx))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := db.Pool().LedgerCountByRef(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !again.AlreadyDone() || n != 1 {
		t.Errorf("repeat after the deadlock: %v, %d ledger rows for %q; want already done and 1", again, n, key)
	}
}
