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
)

// TestCrossShardRolledBackWhole: work that reaches another shard is
// refused with the error IsCrossShard recognises, and vtgate has rolled
// back the key's claim with it; work that swallows the refusal and stores
// a response meets a claim that is gone, so the call fails instead of
// answering for work that was rolled back.
func TestCrossShardRolledBackWhole(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(mysqldriver.New(db))
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

// tenantsOnTwoShards returns two tenant ids whose rows live on different
// shards (where vtgate routes them).
func tenantsOnTwoShards(t *testing.T, db *sql.DB) (a, b int64) {
	t.Helper()
	ctx := context.Background()
	shard := func(tenant int64) string {
		var ks, s string
		// vtgate's own answer: the shard a value maps to.
		row := db.QueryRowContext(ctx, "SELECT keyspace_id, shard FROM xxhash WHERE id = ?", tenant)
		var ksid []byte
		if err := row.Scan(&ksid, &s); err != nil {
			t.Fatalf("vindex lookup: %v", err)
		}
		_ = ks
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

// TestNoWaitInProgress: WithNoWait sets the claim's lock wait through
// vtgate (a session variable, restored after) and a key held by an open
// transaction answers ErrInProgress, the transaction still usable.
func TestNoWaitInProgress(t *testing.T) {
	_, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		t.Fatal(err)
	}
	noWait, err := dedupe.New(mysqldriver.New(db), dedupe.WithNoWait())
	if err != nil {
		t.Fatal(err)
	}
	req := dedupe.Request{Scope: "9200001", Key: fmt.Sprintf("held-%d", time.Now().UnixNano())}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := store.Do(ctx, holder, req, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = noWait.Do(ctx, tx, req, func(context.Context) error { t.Error("work ran while the key was held"); return nil })
	if !errors.Is(err, sqlonce.ErrInProgress) {
		t.Fatalf("Do on a held key: %v, want ErrInProgress", err)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	res, err := noWait.Do(ctx, tx, req, func(context.Context) error { return nil })
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("after the holder committed: %v, %v; want AlreadyDone", res, err)
	}
}
