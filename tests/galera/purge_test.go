package galera

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// purgeKeys, purgers and purgeBatch: with Purge giving a batch up after
// its transaction's 10 attempts, this failed 8 and 4 of 12 Purge calls
// with 1213 in two runs (75 to 150 conflicts between nodes per run), every
// purger deleting the same oldest rows.
const (
	purgeKeys  = 30000
	purgers    = 12
	purgeBatch = 200
)

// TestPurgeFromEveryNode: purgers on every node at once remove every
// expired key, none twice, and no Purge call fails, although their batches
// conflict at COMMIT (Galera's certification reports it as a deadlock).
func TestPurgeFromEveryNode(t *testing.T) {
	c := galera.Shared(t)
	ctx := context.Background()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)
	// Expired keys, oldest first by key number.
	if err := dbs[0].Exec(ctx, `
		INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
		SELECT 'p', CONCAT('k', seq), 1, seq, UTC_TIMESTAMP(6) - INTERVAL 2 DAY, UTC_TIMESTAMP(6) - INTERVAL 1 DAY + INTERVAL seq MICROSECOND
		FROM seq_1_to_`+itoa(purgeKeys)); err != nil {
		t.Fatal(err)
	}
	conflicts := func() (n int64) {
		for i := range c.Nodes {
			db, err := sql.Open("mysql", c.DSN(i+1, ""))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"wsrep_local_cert_failures", "wsrep_local_bf_aborts"} {
				var name string
				var x int64
				if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+v+"'").Scan(&name, &x); err != nil {
					t.Fatal(err)
				}
				n += x
			}
			db.Close()
		}
		return n
	}
	before := conflicts()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var errs []error
	for i := range purgers {
		db := dbs[i%len(dbs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := dedupe.New(db.Driver())
			if err != nil {
				t.Error(err)
				return
			}
			<-start
			n, err := s.Purge(ctx, purgeBatch)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("conflicts between nodes (certification failures and brute-force aborts): %d", conflicts()-before)
	left, err := dbs[1].KeyCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d purgers over %d nodes removed %d of %d keys; %d left; %d Purge calls failed", purgers, len(dbs), total, purgeKeys, left, len(errs))
	for _, err := range errs {
		t.Errorf("Purge failed: %v", err)
	}
	if left != 0 || total != purgeKeys {
		t.Errorf("removed %d, %d left; want %d and 0", total, left, purgeKeys)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
