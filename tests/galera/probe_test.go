package galera

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestFirstCallInAbortedTransaction: mysqldriver reads the session's
// wsrep_sync_wait in the transaction of a driver's first call. On a
// Galera node that transaction may already have been aborted by another
// node's conflicting write: MariaDB then answers the transaction's next
// statement, the probe, with 1213, has rolled the transaction back, and
// runs whatever follows in autocommit. A probe that let the call go on
// after that failure committed the key's claim and the work at once, on
// their own: the work the transaction had done before the call was lost
// while the key said done. The call must fail with the retryable abort,
// leaving nothing behind.
func TestFirstCallInAbortedTransaction(t *testing.T) {
	c := galera.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)
	a, b := dbs[0], dbs[1]
	x, err := a.Pool().OrderInsert(ctx, "g-probe", "g-probe", 1)
	if err != nil {
		t.Fatal(err)
	}
	// A driver of its own on node A, which has not probed its sessions.
	h, err := sql.Open("mysql", a.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	store, err := dedupe.New(testdrv.MySQL(t, h))
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
	if err := abortHolder(ctx, a, x, b, dbs[2]); err != nil {
		t.Fatal(err)
	}

	req := dedupe.Request{Scope: "g-probe", Key: "k"}
	res, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
		return a.Tx(tx).LedgerInsert(ctx, "g-probe", 1)
	})
	t.Logf("Do in the aborted transaction: %v, %v", res, err)
	if err == nil || res.Outcome != 0 {
		t.Fatalf("got %v, %v; want the abort, for a transaction the cluster rolled back", res, err)
	}
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false, want true", err)
	}
	_ = a.Rollback(ctx, tx)
	if _, ok, err := a.Key(ctx, req.Scope, req.Key); err != nil || ok {
		t.Fatalf("key %q in the database (%v): the claim committed outside the transaction", req.Key, err)
	}
	if n, err := a.Pool().LedgerCountByRef(ctx, "g-probe"); err != nil || n != 0 {
		t.Fatalf("%d ledger rows (%v): the work committed outside the transaction", n, err)
	}
}
