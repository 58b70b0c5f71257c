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

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// TestRefusesMultiMode: vtgate's default transaction mode (MULTI) commits
// a transaction's shards one after the other; the driver finds vtgate
// and refuses every call on such a session, naming the setting.
func TestRefusesMultiMode(t *testing.T) {
	c, _ := setup(t)
	db := open(t, c.DSN(vitess.Keyspace))
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Run(context.Background(), dedupe.Request{Scope: "1", Key: "multi"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		t.Error("work ran on a MULTI session")
		return nil, nil
	})
	if !errors.Is(err, sqlonce.ErrInvalidArgument) || !hasAny(err.Error(), "transaction_mode") {
		t.Fatalf("Run on a MULTI session: %v, want ErrInvalidArgument naming transaction_mode", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = '1' AND idempotency_key = 'multi'"); n != 0 {
		t.Fatalf("%d keys written on a MULTI session", n)
	}
	t.Logf("refusal: %v", err)
}

// TestTenantsOverShards is the claim of docs/deployments.md: with the key's
// scope the tenant's id, each key commits on its tenant's shard together
// with the tenant's order, exactly once, while goroutines race on the same
// keys; a fraction of the work also writes to another tenant (most often
// on the other shard), which vtgate refuses and rolls back whole, key and
// all. Effects are counted in the database, per shard.
func TestTenantsOverShards(t *testing.T) {
	c, db := setup(t)
	const (
		tenants  = 24
		keys     = 10 // per tenant
		workers  = 8  // each runs every key: 8 racing attempts per key
		crossOne = 7  // keys with k%crossOne == 0 reach another tenant too
	)
	base := 1000 + int64(len(t.Name())) // tenants of this test only
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	var attempts, firstRuns, alreadyDone, crossRefused, retried atomic.Int64
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tenants * keys {
				// Each worker walks the keys from its own start.
				n := (i + w*keys) % (tenants * keys)
				tenant, k := base+int64(n/keys), n%keys
				cross := k%crossOne == 0
				for try := 0; ; try++ {
					attempts.Add(1)
					res, err := doOrder(ctx, store, db, tenant, k, cross, tenants, base)
					switch {
					case err == nil && res.FirstRun():
						firstRuns.Add(1)
					case err == nil:
						alreadyDone.Add(1)
					case cross && mysqldriver.IsCrossShard(err):
						crossRefused.Add(1)
					case sqlonce.IsRetryable(err) && try < 20:
						retried.Add(1)
						continue
					default:
						errc <- fmt.Errorf("tenant %d key %d: %w", tenant, k, err)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	// Every key that was not refused committed once, with its order.
	var violations int
	for ti := range int64(tenants) {
		tenant := base + ti
		for k := range keys {
			order := fmt.Sprintf("o%d", k)
			nOrders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, order)
			nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", strconv.FormatInt(tenant, 10), order)
			if nOrders != nKeys || nOrders > 1 {
				violations++
				t.Errorf("tenant %d %s: %d orders, %d keys", tenant, order, nOrders, nKeys)
			}
		}
	}
	// The other tenant's row of a cross-tenant order committed exactly
	// when its key did: with the key when the other tenant shares the
	// shard, never when vtgate refused the transaction.
	var crossCommitted int
	for ti := range int64(tenants) {
		tenant := base + ti
		other := base + (ti+1)%int64(tenants)
		for k := 0; k < keys; k += crossOne {
			nX := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", other, fmt.Sprintf("x%d-%d", tenant, k))
			nKeys := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?", strconv.FormatInt(tenant, 10), fmt.Sprintf("o%d", k))
			if nX != nKeys {
				violations++
				t.Errorf("tenant %d o%d: %d keys, %d rows of tenant %d", tenant, k, nKeys, nX, other)
			}
			crossCommitted += nX
		}
	}
	// Where the rows are: each tenant's keys and orders on one shard, both
	// shards used.
	keysBy := shardCounts(t, c, "SELECT COUNT(*) FROM sqlonce_keys WHERE CAST(scope AS SIGNED) BETWEEN ? AND ?", base, base+tenants)
	ordersBy := shardCounts(t, c, "SELECT COUNT(*) FROM orders WHERE tenant_id BETWEEN ? AND ? AND order_id LIKE 'o%'", base, base+tenants)
	for _, shard := range []string{"-80", "80-"} {
		if keysBy[shard] == 0 || keysBy[shard] != ordersBy[shard] {
			t.Errorf("shard %s: %d keys, %d orders (want equal and > 0)", shard, keysBy[shard], ordersBy[shard])
		}
	}
	if crossRefused.Load() == 0 {
		t.Error("no cross-shard work was refused: the test did not reach a second shard")
	}
	t.Logf("attempts %d: first runs %d, already done %d, cross-shard refused %d, retried %d; violations %d; "+
		"cross-tenant orders on a shared shard committed %d; keys per shard %v, orders per shard %v",
		attempts.Load(), firstRuns.Load(), alreadyDone.Load(), crossRefused.Load(), retried.Load(), violations,
		crossCommitted, keysBy, ordersBy)
}

// doOrder records tenant's order k under the key "o<k>" scoped by the
// tenant's id, in one transaction; cross also writes a row of the next
// tenant (refused when that tenant is on the other shard).
func doOrder(ctx context.Context, store *dedupe.Store[*sql.Tx], db *sql.DB, tenant int64, k int, cross bool, tenants int, base int64) (sqlonce.Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return sqlonce.Result{}, err
	}
	defer tx.Rollback()
	order := fmt.Sprintf("o%d", k)
	res, err := store.Do(ctx, tx, dedupe.Request{Scope: strconv.FormatInt(tenant, 10), Key: order}, func(ctx context.Context) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, ?)", tenant, order, 100+k); err != nil {
			return err
		}
		if cross {
			other := base + (tenant-base+1)%int64(tenants)
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", other, fmt.Sprintf("x%d-%d", tenant, k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	return res, tx.Commit()
}

// TestMigrationsUpAgain: migrations.Up at every start, as its doc asks,
// through vtgate: the version table exists and is found (goose's own check
// compares table_schema with DATABASE(), which vtgate answers with the
// keyspace's name and never matches), nothing is applied twice.
func TestMigrationsUpAgain(t *testing.T) {
	_, db := setup(t)
	for range 2 {
		if err := migrations.Up(context.Background(), db, migrations.MySQL); err != nil {
			t.Fatalf("migrations.Up again: %v", err)
		}
	}
}
