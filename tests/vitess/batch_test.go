package vitess

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// TestBatches: DoBatch and RunBatch through vtgate, goroutines racing on
// overlapping batches of each tenant. vtgate cannot plan the MySQL
// driver's one-statement batch claim, so the driver claims each key
// alone there, on the scope's shard; each key's work commits once.
func TestBatches(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tenants, racers = 6, 4
	base := int64(9_600_000)
	ids := []string{"b0", "b1", "b2", "b3", "b4", "b5"}
	var fresh atomic.Int64
	var wg sync.WaitGroup
	for ti := range int64(tenants) {
		for r := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tenant := base + ti
				scope := strconv.FormatInt(tenant, 10)
				// Overlapping halves, in both orders.
				batch := ids[:4]
				if r%2 == 1 {
					batch = []string{ids[5], ids[4], ids[3], ids[2]}
				}
				write := func(ctx context.Context, tx *sql.Tx, keys []string) error {
					for _, k := range keys {
						if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, k); err != nil {
							return err
						}
					}
					fresh.Add(int64(len(keys)))
					return nil
				}
				for try := 0; try < 20; try++ {
					var err error
					if r < 2 {
						_, err = store.RunBatch(ctx, scope, batch, write)
					} else {
						err = func() error {
							tx, err := db.BeginTx(ctx, nil)
							if err != nil {
								return err
							}
							defer tx.Rollback()
							if _, err := store.DoBatch(ctx, tx, scope, batch, func(ctx context.Context, keys []string) error { return write(ctx, tx, keys) }); err != nil {
								return err
							}
							return tx.Commit()
						}()
					}
					if sqlonce.IsRetryable(err) {
						continue
					}
					if err != nil {
						t.Errorf("tenant %d batch %v: %v", tenant, batch, err)
					}
					return
				}
				t.Errorf("tenant %d: still retrying after 20 tries", tenant)
			}()
		}
	}
	wg.Wait()
	for ti := range int64(tenants) {
		for _, k := range ids {
			tenant := base + ti
			nOrders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, k)
			nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", strconv.FormatInt(tenant, 10), k)
			if nOrders != 1 || nKeys != 1 {
				t.Errorf("tenant %d %s: %d orders, %d keys; want 1 each", tenant, k, nOrders, nKeys)
			}
		}
	}
	t.Logf("keys run as fresh (work bodies committed or retried): %d", fresh.Load())
}

// TestPurgePerShard: a purge through vtgate is a DELETE ... ORDER BY ...
// LIMIT over every shard, which vtgate refuses (an error, nothing
// deleted); the same purge on a handle whose database is one shard
// (keyspace:shard) deletes that shard's expired keys, and both shards'
// purges together delete every expired key and no live one.
func TestPurgePerShard(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	short, err := dedupe.New(mysqldriver.New(db), dedupe.WithTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		t.Fatal(err)
	}
	base := int64(9_700_000)
	const tenants = 8
	for ti := range int64(tenants) {
		scope := strconv.FormatInt(base+ti, 10)
		for _, s := range []*dedupe.Store[*sql.Tx]{short, store} {
			for k := range 3 {
				key := fmt.Sprintf("p%d-%p", k, s)
				if _, err := s.Run(ctx, dedupe.Request{Scope: scope, Key: key}, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	time.Sleep(10 * time.Millisecond)
	live := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at > UTC_TIMESTAMP(6)")
	if _, err := store.Purge(ctx, 100); err == nil {
		t.Fatal("a purge across shards through vtgate succeeded; docs/deployments.md says it is refused")
	} else {
		t.Logf("purge through vtgate: %v", err)
	}
	var purged int64
	for _, shard := range []string{"-80", "80-"} {
		sdb := open(t, c.DSN(vitess.Keyspace+":"+shard, single))
		s, err := dedupe.New(mysqldriver.New(sdb))
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Purge(ctx, 100)
		if err != nil {
			t.Fatalf("purge of shard %s: %v", shard, err)
		}
		purged += n
	}
	if purged < tenants*3 {
		t.Errorf("purged %d keys, want at least the %d expired", purged, tenants*3)
	}
	if left := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at <= UTC_TIMESTAMP(6)"); left != 0 {
		t.Errorf("%d expired keys left", left)
	}
	if after := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at > UTC_TIMESTAMP(6)"); after != live {
		t.Errorf("live keys %d before, %d after the purge", live, after)
	}
}
