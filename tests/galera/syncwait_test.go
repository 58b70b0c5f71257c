package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// pairs is how many write-on-one-node, read-on-another pairs each case
// runs.
const pairs = 100

// TestSyncWaitRefused: on a Galera node whose sessions read with
// wsrep_sync_wait=0 (the default), the MySQL driver refuses every call
// with ErrInvalidArgument naming the DSN parameter, rather than answering
// token.ErrUnknown or ErrLeaseLost for rows another node has committed and
// this one has not applied yet (measured before the check: 142 of 300
// Consume calls answered ErrUnknown, 139 of 300 Complete calls
// ErrLeaseLost).
func TestSyncWaitRefused(t *testing.T) {
	c := galera.Shared(t)
	ctx := context.Background()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("")...)
	for i, db := range dbs {
		d := db.Driver()
		tokens, err := token.New(d)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tokens.Issue(ctx, "s")
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("node %d: Issue with wsrep_sync_wait=0: %v, want ErrInvalidArgument", i+1, err)
		}
		t.Logf("node %d: %v", i+1, err)
		store, err := dedupe.New(d)
		if err != nil {
			t.Fatal(err)
		}
		err = harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
			_, err := store.Do(ctx, tx, dedupe.Request{Scope: "s", Key: "k"}, func(context.Context) error { return nil })
			return err
		})
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("node %d: Do with wsrep_sync_wait=0: %v, want ErrInvalidArgument", i+1, err)
		}
	}
	// The same server with the DSN fixed answers.
	if err := issueOn(t, dbs[0].DSN()+"&wsrep_sync_wait=1&interpolateParams=true"); err != nil {
		t.Fatalf("Issue with wsrep_sync_wait=1: %v", err)
	}
}

// issueOn issues a token through a driver of its own on a handle of its
// own for dsn: the driver's first call.
func issueOn(t *testing.T, dsn string) error {
	t.Helper()
	own, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	tokens, err := token.New(testdrv.MySQL(t, own))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Issue(context.Background(), "s")
	return err
}

// TestSyncWaitAcrossNodes: with wsrep_sync_wait=1 in the DSN, a token
// issued on one node is consumed on the next, and a lease claimed on one
// node is completed on the next, every time. With 1 an UPDATE does not
// wait for what other nodes committed, so the driver runs a lease's
// Complete in a transaction (BEGIN waits); with 3 it runs it in
// autocommit, and the UPDATE waits itself.
func TestSyncWaitAcrossNodes(t *testing.T) {
	for _, wait := range []string{"1", "3"} {
		t.Run("wsrep_sync_wait="+wait, func(t *testing.T) { syncWaitAcrossNodes(t, wait) })
	}
}

func syncWaitAcrossNodes(t *testing.T, wait string) {
	c := galera.Shared(t)
	ctx := context.Background()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", "wsrep_sync_wait="+wait, "interpolateParams=true")...)
	var tokens []*token.Store[*sql.Tx]
	var stores []*dedupe.Store[*sql.Tx]
	for _, db := range dbs {
		ts, err := token.New(db.Driver())
		if err != nil {
			t.Fatal(err)
		}
		s, err := dedupe.New(db.Driver())
		if err != nil {
			t.Fatal(err)
		}
		tokens, stores = append(tokens, ts), append(stores, s)
	}
	unknown, lost := 0, 0
	for i := range pairs {
		a, b := i%3, (i+1)%3
		tok, err := tokens[a].Issue(ctx, "pay")
		if err != nil {
			t.Fatal(err)
		}
		err = harness.WithTx(ctx, dbs[b], harness.Default, func(tx *sql.Tx) error {
			_, err := tokens[b].Consume(ctx, tx, "pay", tok)
			return err
		})
		if errors.Is(err, token.ErrUnknown) {
			unknown++
		} else if err != nil {
			t.Fatalf("Consume on node %d: %v", b+1, err)
		}

		l, res, err := stores[a].Claim(ctx, dedupe.Request{Scope: "lease", Key: fmt.Sprint(i)}, time.Minute)
		if err != nil || !res.FirstRun() {
			t.Fatalf("Claim on node %d: %v %v", a+1, res, err)
		}
		err = stores[b].Complete(ctx, l, []byte("done"))
		if errors.Is(err, sqlonce.ErrLeaseLost) {
			lost++
		} else if err != nil {
			t.Fatalf("Complete on node %d: %v", b+1, err)
		}
	}
	if unknown > 0 || lost > 0 {
		t.Errorf("across nodes with wsrep_sync_wait=%s: %d of %d Consume answered ErrUnknown, %d of %d Complete ErrLeaseLost; want 0", wait, unknown, pairs, lost, pairs)
	}
}
