package vitess

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestBatches: DoBatch and RunBatch through vtgate, goroutines racing on
// overlapping batches of each tenant. vtgate cannot plan the MySQL
// driver's one-statement batch claim, so the driver claims each key
// alone there, on the scope's shard; each key's work commits once.
func TestBatches(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
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
