package vitess

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// killTablet kills the tablet's MySQL connection that runs tx's
// transaction on tenant's shard, and waits until mysqld has closed it. It
// writes the tenant's order pre first, in tx, and reads CONNECTION_ID()
// with it, so that the read reaches that shard alone, in tx's transaction
// there (vtgate runs no KILL: the mysqld behind the tablets is asked).
func killTablet(t *testing.T, c *vitess.Cluster, ctx context.Context, tx *sql.Tx, tenant int64, pre string) {
	t.Helper()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, pre); err != nil {
		t.Fatalf("order %s: %v", pre, err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID() FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, pre).Scan(&id); err != nil {
		t.Fatalf("the tablet connection's id: %v", err)
	}
	dsn, err := c.MySQLDSN()
	if err != nil {
		t.Fatal(err)
	}
	my := open(t, dsn)
	defer my.Close()
	if _, err := my.ExecContext(ctx, "KILL ?", id); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
	for {
		var left int
		if err := my.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", id).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("connection %d still there: %v", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestKilledTabletConnBatch: the tablet's MySQL connection under the
// transaction of a batch (and of a Do) is killed (a tablet restart, a
// failover, an administrator's KILL) before the call, after a write of the
// caller's, or in the work before or after its writes. The statement
// after the kill must fail (2013 or 2006; vtgate then answers 1317
// "transaction ... ended" and runs later statements outside any
// transaction), and so must the call: never FirstRun, and nothing of the
// transaction commits, neither a key nor an order, whether the caller
// that gets an error rolls back or ignores it and commits. A claim that
// called LAST_INSERT_ID(x) got no error there: vttablet resets the last
// insert id first with a statement that reconnects on a lost connection,
// and the claim, the rest of the batch and the work committed one by one
// in autocommit on the new connection, the caller's write before them
// lost.
func TestKilledTabletConnBatch(t *testing.T) {
	c, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tenant := int64(9_700_001)
	for shardOf(t, db, tenant) != shardOf(t, db, strconv.FormatInt(tenant, 10)) {
		tenant++
	}
	scope := strconv.FormatInt(tenant, 10)
	box, err := inbox.New(testdrv.MySQL(t, db), scope)
	if err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, tx *sql.Tx, keys []string) error {
		for _, k := range keys {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, k); err != nil {
				return err
			}
		}
		return nil
	}
	// Where the kill lands.
	const (
		beforeCall = "before the call"
		beforeWork = "in the work, before its writes"
		afterWork  = "in the work, after its writes"
	)
	// work writes the keys' orders with the kill at point.
	// pre names the order the kill writes before it: the batch's first
	// key and "-pre".
	pre := func(keys []string) string { return keys[0] + "-pre" }
	work := func(t *testing.T, point string) func(ctx context.Context, tx *sql.Tx, keys []string) error {
		return func(ctx context.Context, tx *sql.Tx, keys []string) error {
			if point == beforeWork {
				killTablet(t, c, ctx, tx, tenant, pre(keys))
			}
			if err := write(ctx, tx, keys); err != nil {
				return err
			}
			if point == afterWork {
				killTablet(t, c, ctx, tx, tenant, pre(keys))
			}
			return nil
		}
	}
	inTx := func(t *testing.T, point string, commit bool, keys []string, call func(tx *sql.Tx) ([]sqlonce.Result, error)) ([]sqlonce.Result, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if point == beforeCall {
			killTablet(t, c, ctx, tx, tenant, pre(keys))
		}
		res, err := call(tx)
		if err == nil || commit {
			if cErr := tx.Commit(); cErr != nil {
				t.Logf("COMMIT: %v", cErr)
			}
		}
		return res, err
	}
	type call func(t *testing.T, point string, commit bool, keys []string) ([]sqlonce.Result, error)
	calls := []struct {
		name string
		own  bool // the call's own transaction: no point before it
		call call
	}{
		{"DoBatch", false, func(t *testing.T, point string, commit bool, keys []string) ([]sqlonce.Result, error) {
			return inTx(t, point, commit, keys, func(tx *sql.Tx) ([]sqlonce.Result, error) {
				w := work(t, point)
				return store.DoBatch(ctx, tx, scope, keys, func(ctx context.Context, fresh []string) error { return w(ctx, tx, fresh) })
			})
		}},
		{"Do", false, func(t *testing.T, point string, commit bool, keys []string) ([]sqlonce.Result, error) {
			return inTx(t, point, commit, keys, func(tx *sql.Tx) ([]sqlonce.Result, error) {
				w := work(t, point)
				res, err := store.Do(ctx, tx, dedupe.Request{Scope: scope, Key: keys[0]}, func(ctx context.Context) error { return w(ctx, tx, keys) })
				return []sqlonce.Result{res}, err
			})
		}},
		{"HandleBatchTx", false, func(t *testing.T, point string, commit bool, keys []string) ([]sqlonce.Result, error) {
			return inTx(t, point, commit, keys, func(tx *sql.Tx) ([]sqlonce.Result, error) {
				w := work(t, point)
				return box.HandleBatchTx(ctx, tx, keys, func(ctx context.Context, fresh []string) error { return w(ctx, tx, fresh) })
			})
		}},
		{"RunBatch", true, func(t *testing.T, point string, _ bool, keys []string) ([]sqlonce.Result, error) {
			first := true
			w := work(t, point)
			return store.RunBatch(ctx, scope, keys, func(ctx context.Context, tx *sql.Tx, fresh []string) error {
				if !first { // a retry runs without the kill
					return write(ctx, tx, fresh)
				}
				first = false
				return w(ctx, tx, fresh)
			})
		}},
		{"HandleBatch", true, func(t *testing.T, point string, _ bool, keys []string) ([]sqlonce.Result, error) {
			first := true
			w := work(t, point)
			return box.HandleBatch(ctx, keys, func(ctx context.Context, tx *sql.Tx, fresh []string) error {
				if !first {
					return write(ctx, tx, fresh)
				}
				first = false
				return w(ctx, tx, fresh)
			})
		}},
	}
	n := 0
	for _, cl := range calls {
		for _, point := range []string{beforeCall, beforeWork, afterWork} {
			if cl.own && point == beforeCall {
				continue
			}
			for _, commit := range []bool{false, true} {
				if cl.own && commit {
					continue
				}
				// done: the batch's first key done before, by a call that
				// committed; its claim is a duplicate and a locking read.
				for _, done := range []bool{false, true} {
					if done && cl.name == "Do" && point != beforeCall {
						continue // the work does not run
					}
					n++
					name := fmt.Sprintf("%s/%s/commit=%v/done=%v", cl.name, point, commit, done)
					t.Run(name, func(t *testing.T) {
						base := fmt.Sprintf("kill-%d-%d", n, time.Now().UnixNano())
						keys := []string{base + "-a", base + "-b", base + "-c"}
						if done {
							if _, err := cl.call(t, "", false, keys[:1]); err != nil {
								t.Fatalf("the first key, before: %v", err)
							}
						}
						res, err := cl.call(t, point, commit, keys)
						orders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id LIKE ?", tenant, base+"%")
						keyRows := 0
						for _, k := range keys {
							keyRows += count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", scope, k)
						}
						want := 0
						if done {
							want = 1 // the first key's, from before
						}
						t.Logf("%v, %v; %d orders, %d keys", res, err, orders, keyRows)
						if cl.own && err == nil {
							// RunBatch and HandleBatch may run the batch
							// again after the rollback: then every key
							// has its order and its key, once.
							if orders != len(keys) || keyRows != len(keys) {
								t.Errorf("answered %v: %d orders, %d keys; want %d of each", res, orders, keyRows, len(keys))
							}
							return
						}
						if err == nil {
							t.Errorf("answered %v for a batch whose tablet connection was killed", res)
						}
						if orders != want || keyRows != want {
							t.Errorf("%d orders, %d keys committed; want %d", orders, keyRows, want)
						}
					})
				}
			}
		}
	}
}
