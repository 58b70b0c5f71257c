package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// TestRunAndLeases: Store.Run (its own transaction) and a lease's Claim
// and Complete (autocommit) through vtgate, racing goroutines per key,
// tenants on both shards: the work runs once per key, counted in the
// database.
func TestRunAndLeases(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tenants, keys, racers = 8, 4, 6
	base := int64(9_300_000)
	var runs, leases atomic.Int64
	var wg sync.WaitGroup
	for ti := range int64(tenants) {
		for k := range keys {
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tenant := base + ti
					scope := strconv.FormatInt(tenant, 10)
					for try := 0; try < 20; try++ {
						_, err := store.Run(ctx, dedupe.Request{Scope: scope, Key: fmt.Sprintf("run%d", k)}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
							_, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, fmt.Sprintf("run%d", k))
							return []byte("done"), err
						})
						if sqlonce.IsRetryable(err) {
							continue
						}
						if err != nil {
							t.Errorf("Run: %v", err)
						}
						runs.Add(1)
						break
					}
					for try := 0; try < 20; try++ {
						l, res, err := store.Claim(ctx, dedupe.Request{Scope: scope, Key: fmt.Sprintf("lease%d", k)}, 30*time.Second)
						if errors.Is(err, sqlonce.ErrInProgress) || sqlonce.IsRetryable(err) {
							time.Sleep(20 * time.Millisecond)
							continue
						}
						if err != nil {
							t.Errorf("Claim: %v", err)
							return
						}
						if !res.FirstRun() {
							return
						}
						if _, err := db.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, fmt.Sprintf("lease%d", k)); err != nil {
							t.Errorf("lease work: %v", err)
						}
						if err := store.Complete(ctx, l, []byte("done")); err != nil {
							t.Errorf("Complete: %v", err)
						}
						leases.Add(1)
						return
					}
				}()
			}
		}
	}
	wg.Wait()
	for _, prefix := range []string{"run", "lease"} {
		n := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id BETWEEN ? AND ? AND order_id LIKE ?", base, base+tenants, prefix+"%")
		if n != tenants*keys {
			t.Errorf("%s: %d orders, want %d (one per key)", prefix, n, tenants*keys)
		}
	}
	if n := leases.Load(); n != tenants*keys {
		t.Errorf("%d leases completed, want %d", n, tenants*keys)
	}
	t.Logf("Run calls answered %d; leases run and completed %d", runs.Load(), leases.Load())
}

// TestTokens: a token issued for a tenant is consumed once in the
// transaction of the tenant's order, on the tenant's shard.
func TestTokens(t *testing.T) {
	_, db := setup(t)
	tokens, err := token.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := int64(9_400_000)
	const tenants, racers = 8, 4
	var firsts atomic.Int64
	for ti := range int64(tenants) {
		tenant := base + ti
		scope := strconv.FormatInt(tenant, 10)
		tok, err := tokens.Issue(ctx, scope)
		if err != nil {
			t.Fatalf("Issue: %v", err)
		}
		var wg sync.WaitGroup
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for try := 0; try < 20; try++ {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Error(err)
						return
					}
					res, err := tokens.Consume(ctx, tx, scope, tok)
					if err == nil && res.FirstRun() {
						_, err = tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, 'tok', 1)", tenant)
					}
					if err == nil {
						err = tx.Commit()
					}
					_ = tx.Rollback()
					if sqlonce.IsRetryable(err) {
						continue
					}
					if err != nil {
						t.Errorf("Consume: %v", err)
					} else if res.FirstRun() {
						firsts.Add(1)
					}
					return
				}
			}()
		}
		wg.Wait()
	}
	if n := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id BETWEEN ? AND ? AND order_id = 'tok'", base, base+tenants); n != tenants || firsts.Load() != tenants {
		t.Fatalf("%d orders, %d first consumptions; want %d each", n, firsts.Load(), tenants)
	}
}
