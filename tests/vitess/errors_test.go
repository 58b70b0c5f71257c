package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// TestCrossShardRolledBackWhole: work that reaches another shard is
// refused with the error IsCrossShard recognises, and vtgate has rolled
// back the key's claim with it; work that swallows the refusal and stores
// a response meets a claim that is gone, so the call fails instead of
// answering for work that was rolled back.
func TestCrossShardRolledBackWhole(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	for _, swallow := range []bool{false, true} {
		t.Run(fmt.Sprintf("swallow=%v", swallow), func(t *testing.T) {
			key := fmt.Sprintf("cross-%v-%d", swallow, time.Now().UnixNano())
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var workErr error
			_, err = store.DoResponse(ctx, tx, dedupe.Request{Scope: fmt.Sprint(a), Key: key}, func(ctx context.Context) ([]byte, error) {
				if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, key); err != nil {
					return nil, err
				}
				_, workErr = tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", b, key)
				if swallow {
					return []byte("ok"), nil
				}
				return nil, workErr
			})
			if !mysqldriver.IsCrossShard(workErr) {
				t.Fatalf("the second shard's write: %v, want vtgate's cross-shard refusal", workErr)
			}
			if err == nil {
				t.Fatal("DoResponse succeeded for work vtgate rolled back")
			}
			if !swallow && !mysqldriver.IsCrossShard(err) {
				t.Fatalf("DoResponse: %v, want the cross-shard refusal in its chain", err)
			}
			t.Logf("DoResponse: %v", err)
			_ = tx.Commit() // what a caller ignoring the error would do
			if n := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id IN (?, ?) AND order_id = ?", a, b, key); n != 0 {
				t.Fatalf("%d orders committed", n)
			}
			if n := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", fmt.Sprint(a), key); n != 0 {
				t.Fatalf("%d keys committed", n)
			}
		})
	}
}

// TestRunCrossShardSwallowed: Store.Run's work that swallows vtgate's
// cross-shard refusal and returns a success. vtgate has rolled the
// transaction back, the statements after run in autocommit: Run must not
// then record the key alone. It claims the key before the work on vtgate
// and records the response by the claim's token, which finds the claim
// gone: Run fails and nothing commits. (Before, the key committed without
// its order, and Run answered a first run.)
func TestRunCrossShardSwallowed(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	for _, resp := range [][]byte{nil, []byte("receipt")} {
		key := fmt.Sprintf("run-swallow-%d-%d", len(resp), time.Now().UnixNano())
		var workErr error
		res, err := store.Run(ctx, dedupe.Request{Scope: fmt.Sprint(a), Key: key}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, key); err != nil {
				return nil, err
			}
			_, workErr = tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", b, key)
			return resp, nil
		})
		if !mysqldriver.IsCrossShard(workErr) {
			t.Fatalf("the second shard's write: %v, want the cross-shard refusal", workErr)
		}
		nOrders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id IN (?, ?) AND order_id = ?", a, b, key)
		nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", fmt.Sprint(a), key)
		if err == nil || nOrders != 0 || nKeys != 0 {
			t.Fatalf("response %q: Run = %v, %v; %d orders, %d keys committed; want an error and nothing", resp, res, err, nOrders, nKeys)
		}
		t.Logf("Run: %v", err)
	}
}

// tenantsOnTwoShards returns two tenant ids whose rows live on different
// shards (where vtgate routes them).
func tenantsOnTwoShards(t *testing.T, db *sql.DB) (a, b int64) {
	t.Helper()
	ctx := context.Background()
	shard := func(tenant int64) string {
		// vtgate's own answer: a vindex reads as a table of the shard
		// each value maps to.
		var ksid []byte
		var s string
		if err := db.QueryRowContext(ctx, "SELECT keyspace_id, shard FROM xxhash WHERE id = ?", tenant).Scan(&ksid, &s); err != nil {
			t.Fatalf("vindex lookup: %v", err)
		}
		return s
	}
	a = 9_000_001
	sa := shard(a)
	for b = a + 1; b < a+100; b++ {
		if shard(b) != sa {
			return a, b
		}
	}
	t.Fatal("no two tenants on different shards")
	return
}

// TestDeadlockRetryable: vtgate passes MySQL's deadlock (1213) on inside
// its own wrapping; sqlonce.IsRetryable recognises it.
func TestDeadlockRetryable(t *testing.T) {
	_, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tenant := int64(9_100_001)
	for _, o := range []string{"d1", "d2"} {
		if _, err := db.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 0) ON DUPLICATE KEY UPDATE amount = 0", tenant, o); err != nil {
			t.Fatal(err)
		}
	}
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	upd := "UPDATE orders SET amount = amount + 1 WHERE tenant_id = ? AND order_id = ?"
	if _, err := tx1.ExecContext(ctx, upd, tenant, "d1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx2.ExecContext(ctx, upd, tenant, "d2"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := tx1.ExecContext(ctx, upd, tenant, "d2")
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond) // tx1 waits for d2's lock
	_, err2 := tx2.ExecContext(ctx, upd, tenant, "d1")
	err1 := <-errc
	dead := errors.Join(err1, err2)
	if dead == nil {
		t.Fatal("no deadlock")
	}
	if !sqlonce.IsRetryable(dead) {
		t.Fatalf("deadlock through vtgate not retryable: %v", dead)
	}
	t.Logf("deadlock: %v", dead)
}

// TestNoWaitRefused: a bounded lock wait (WithNoWait) sets the session's
// innodb_lock_wait_timeout inside the transaction, which vtgate checks on
// the keyspace's first shard: for a key on the other shard that made the
// claim a cross-shard transaction (1317), for a key on the first it
// worked. The driver refuses it through vtgate for every key, before any
// statement, and the transaction stays usable.
func TestNoWaitRefused(t *testing.T) {
	_, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	noWait, err := dedupe.New(testdrv.MySQL(t, db), dedupe.WithNoWait())
	if err != nil {
		t.Fatal(err)
	}
	a, b := tenantsOnTwoShards(t, db)
	for _, tenant := range []int64{a, b} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = noWait.Do(ctx, tx, dedupe.Request{Scope: fmt.Sprint(tenant), Key: "nowait"}, func(context.Context) error {
			t.Error("work ran")
			return nil
		})
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || mysqldriver.IsCrossShard(err) {
			t.Fatalf("tenant %d: Do WithNoWait: %v, want ErrInvalidArgument", tenant, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, 'nowait', 1)", tenant); err != nil {
			t.Fatalf("transaction unusable after the refusal: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFirstCallInTransaction: the driver's first call on a handle probes
// the session (its version, its transaction mode) inside the caller's
// transaction; the probe reaches no shard, so a transaction already on
// either shard goes on there, and one that has reached no shard yet goes
// to its key's. (The probe used to read the server's variables with SHOW,
// which vtgate sends to a shard of its choosing: in a transaction whose
// first statement was the call, the claim on the other shard then met the
// cross-shard refusal, for about half the fresh handles.)
func TestFirstCallInTransaction(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := tenantsOnTwoShards(t, db)
	for _, writeFirst := range []bool{true, false} {
		for i := range 6 {
			for _, tenant := range []int64{a, b} {
				fresh := open(t, c.DSN(vitess.Keyspace, single)) // a handle never probed
				store, err := dedupe.New(testdrv.MySQL(t, fresh))
				if err != nil {
					t.Fatal(err)
				}
				tx, err := fresh.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("first-%v-%d-%d", writeFirst, i, time.Now().UnixNano())
				if writeFirst {
					if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, key); err != nil {
						t.Fatal(err)
					}
				}
				res, err := store.Do(ctx, tx, dedupe.Request{Scope: fmt.Sprint(tenant), Key: key}, func(context.Context) error { return nil })
				if err != nil || !res.FirstRun() {
					t.Fatalf("tenant %d, write first %v, handle %d: first call in a transaction: %v, %v", tenant, writeFirst, i, res, err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				fresh.Close()
			}
		}
	}
}
