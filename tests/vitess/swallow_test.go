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
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestSwallowedCrossShardNotFirstRun: work that records no response (Do,
// DoBatch, the inbox's Handle and HandleBatch, in the caller's
// transaction and in one of their own) writes its tenant's order, then a
// row on another shard, and swallows vtgate's refusal of that write.
// vtgate has rolled the whole transaction back, claim included, and a
// COMMIT after answers OK on nothing: the call must fail with an error
// IsCrossShard recognises and IsRetryable does not, never answer
// FirstRun; no key and no order commits.
func TestSwallowedCrossShardNotFirstRun(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	scope := strconv.FormatInt(a, 10)
	box, err := inbox.New(testdrv.MySQL(t, db), scope)
	if err != nil {
		t.Fatal(err)
	}
	// work writes tenant a's order (on the key's shard), then tenant b's
	// (the other shard), and returns no error whatever happened.
	work := func(ctx context.Context, tx *sql.Tx, key string) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", b, key)
		if !mysqldriver.IsCrossShard(err) {
			t.Errorf("the second shard's write: %v, want vtgate's cross-shard refusal", err)
		}
		return nil
	}
	// inTx runs call in a transaction of the test's, and commits it
	// whatever call answered, as a caller ignoring the error would.
	inTx := func(call func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = call(tx)
		if cErr := tx.Commit(); cErr != nil {
			t.Logf("COMMIT: %v", cErr)
		}
		return err
	}
	cases := []struct {
		name string
		call func(key string) (any, error)
	}{
		{"Do", func(key string) (any, error) {
			var res sqlonce.Result
			err := inTx(func(tx *sql.Tx) (err error) {
				res, err = store.Do(ctx, tx, dedupe.Request{Scope: scope, Key: key}, func(ctx context.Context) error { return work(ctx, tx, key) })
				return err
			})
			return res, err
		}},
		{"DoBatch", func(key string) (any, error) {
			var res []sqlonce.Result
			err := inTx(func(tx *sql.Tx) (err error) {
				res, err = store.DoBatch(ctx, tx, scope, []string{key, key + "-2"}, func(ctx context.Context, _ []string) error { return work(ctx, tx, key) })
				return err
			})
			return res, err
		}},
		{"HandleTx", func(key string) (any, error) {
			var res sqlonce.Result
			err := inTx(func(tx *sql.Tx) (err error) {
				res, err = box.HandleTx(ctx, tx, key, func(ctx context.Context) error { return work(ctx, tx, key) })
				return err
			})
			return res, err
		}},
		{"Handle", func(key string) (any, error) {
			return box.Handle(ctx, key, func(ctx context.Context, tx *sql.Tx) error { return work(ctx, tx, key) })
		}},
		{"HandleBatch", func(key string) (any, error) {
			return box.HandleBatch(ctx, []string{key, key + "-2"}, func(ctx context.Context, tx *sql.Tx, _ []string) error { return work(ctx, tx, key) })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("swallow-%s-%d", c.name, time.Now().UnixNano())
			res, err := c.call(key)
			nOrders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id IN (?, ?) AND order_id = ?", a, b, key)
			nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key IN (?, ?)", scope, key, key+"-2")
			if err == nil {
				t.Fatalf("answered %v for work vtgate rolled back (%d orders, %d keys committed)", res, nOrders, nKeys)
			}
			if !mysqldriver.IsCrossShard(err) || sqlonce.IsRetryable(err) {
				t.Errorf("error %v: IsCrossShard %v, IsRetryable %v; want true, false", err, mysqldriver.IsCrossShard(err), sqlonce.IsRetryable(err))
			}
			if nOrders != 0 || nKeys != 0 {
				t.Errorf("%d orders, %d keys committed; want none", nOrders, nKeys)
			}
			t.Logf("%s: %v", c.name, err)
		})
	}
}
