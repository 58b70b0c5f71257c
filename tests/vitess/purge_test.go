package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
	"github.com/sqlonce/sqlonce/token"
)

// TestPurge: through vtgate a purge's one statement over every shard is
// refused (a DELETE ... ORDER BY ... LIMIT across shards), so the MySQL
// driver purges shard by shard. Keys and tokens of tenants on both shards,
// some expired and some live: dedupe's Purge and token's Purge in small
// batches delete every expired row and no live one (TestPurgeEvery runs
// PurgeEvery); a PurgeTx in a caller's transaction is refused with
// sqlonce.ErrInvalidArgument, and on a handle whose database is one shard
// (keyspace:shard) it purges that shard.
func TestPurge(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	short, err := dedupe.New(testdrv.MySQL(t, db), dedupe.WithTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	shortTok, err := token.New(testdrv.MySQL(t, db), token.WithTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	const tenants = 8
	fill := func(base int64, round string) {
		t.Helper()
		for ti := range int64(tenants) {
			scope := strconv.FormatInt(base+ti, 10)
			for _, s := range []*dedupe.Store[*sql.Tx]{short, store} {
				for k := range 3 {
					key := fmt.Sprintf("%s%d-%p", round, k, s)
					if _, err := s.Run(ctx, dedupe.Request{Scope: scope, Key: key}, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, s := range []*token.Store[*sql.Tx]{shortTok, tokens} {
				if _, err := s.Issue(ctx, scope); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	const expiredKeys = "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at <= UTC_TIMESTAMP(6) AND namespace <> 3"
	const liveKeys = "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at > UTC_TIMESTAMP(6)"
	const expiredTokens = "SELECT COUNT(*) FROM sqlonce_tokens WHERE expires_at <= UTC_TIMESTAMP(6)"
	const liveTokens = "SELECT COUNT(*) FROM sqlonce_tokens WHERE expires_at > UTC_TIMESTAMP(6)"

	fill(9_700_000, "a")
	perShard := shardCounts(t, c, expiredKeys)
	if perShard["-80"] == 0 || perShard["80-"] == 0 {
		t.Fatalf("expired keys per shard %v: want some on both", perShard)
	}
	live, liveTok := count(t, db, liveKeys), count(t, db, liveTokens)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PurgeTx(ctx, tx, 100); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("PurgeTx through vtgate: %v; want ErrInvalidArgument", err)
	} else {
		t.Logf("PurgeTx: %v", err)
	}
	_ = tx.Rollback()

	n, err := store.Purge(ctx, 5)
	if err != nil {
		t.Fatalf("Purge through vtgate: %v", err)
	}
	nTok, err := tokens.Purge(ctx, 5)
	if err != nil {
		t.Fatalf("token Purge through vtgate: %v", err)
	}
	t.Logf("purged %d keys (%v expired per shard), %d tokens", n, perShard, nTok)
	if n < tenants*3 || nTok < tenants {
		t.Errorf("purged %d keys, %d tokens; want at least %d, %d", n, nTok, tenants*3, tenants)
	}
	if left := count(t, db, expiredKeys); left != 0 {
		t.Errorf("%d expired keys left", left)
	}
	if left := count(t, db, expiredTokens); left != 0 {
		t.Errorf("%d expired tokens left", left)
	}
	if after := count(t, db, liveKeys); after != live {
		t.Errorf("live keys %d before, %d after", live, after)
	}
	if after := count(t, db, liveTokens); after != liveTok {
		t.Errorf("live tokens %d before, %d after", liveTok, after)
	}

	// A handle on one shard purges in the caller's transaction.
	fill(9_720_000, "c")
	for _, shard := range []string{"-80", "80-"} {
		sdb := open(t, c.DSN(vitess.Keyspace+":"+shard, single))
		s, err := dedupe.New(testdrv.MySQL(t, sdb))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PurgeTx(ctx, tx, 1000); err != nil {
			t.Fatalf("PurgeTx on shard %s: %v", shard, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if left := count(t, db, expiredKeys); left != 0 {
		t.Errorf("per-shard PurgeTx: %d expired keys left", left)
	}
}

// TestPurgeEvery: three instances, each with a handle of its own, run
// PurgeEvery on the two-shard keyspace. They elect one purger: only one
// instance purges, the others skip every round; its rounds delete every
// expired key of tenants on both shards and no live one, twice over (keys
// that expire while the purger runs are taken by its next rounds), and no
// round fails. Before the MySQL driver listed a shard's expired keys and
// deleted them one by one, every round failed with 1205: the batch's
// transaction held the purger's lease row, and the shard's range DELETE,
// on another connection, waited for it (the row after the expired ones in
// the expires_at index).
func TestPurgeEvery(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		tenants   = 8
		instances = 3
		interval  = 2 * time.Second // the lease lasts two: a stall under that keeps it
	)
	base := int64(9_740_000)
	run := time.Now().UnixNano() // keys of this run only (-count)
	short, err := dedupe.New(testdrv.MySQL(t, db), dedupe.WithTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	long, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	const mine = " AND namespace <> 3 AND CAST(scope AS SIGNED) BETWEEN ? AND ?"
	expiredKeys := "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at <= UTC_TIMESTAMP(6)" + mine
	liveKeys := "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at > UTC_TIMESTAMP(6)" + mine
	// fill records 3 keys that expire at once and 2 that live for a day
	// per tenant, and waits until the short ones have expired (the
	// purger may delete them meanwhile).
	fill := func(round string) {
		t.Helper()
		for ti := range int64(tenants) {
			scope := strconv.FormatInt(base+ti, 10)
			for k := range 3 {
				if _, err := short.Run(ctx, dedupe.Request{Scope: scope, Key: fmt.Sprintf("every-%d-%s-short%d", run, round, k)}, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }); err != nil {
					t.Fatal(err)
				}
			}
			for k := range 2 {
				if _, err := long.Run(ctx, dedupe.Request{Scope: scope, Key: fmt.Sprintf("every-%d-%s-long%d", run, round, k)}, func(context.Context, *sql.Tx) ([]byte, error) { return nil, nil }); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitFor(t, ctx, "the short keys to expire", func() (int, bool) {
			n := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE expires_at > UTC_TIMESTAMP(6) AND idempotency_key LIKE ?"+mine, "every-"+strconv.FormatInt(run, 10)+"-"+round+"-short%", base, base+tenants)
			return n, n == 0
		})
	}
	fill("a")
	expired := count(t, db, expiredKeys, base, base+tenants)
	perShard := shardCounts(t, c, expiredKeys, base, base+tenants)
	if perShard["-80"] == 0 || perShard["80-"] == 0 {
		t.Fatalf("expired keys per shard %v: want some on both", perShard)
	}
	live := count(t, db, liveKeys, base, base+tenants)

	// Each instance's rounds, by outcome, reported to its Observer.
	type tally struct {
		mu              sync.Mutex
		purged, skipped int
		rows            int64
		errs            []error
	}
	tallies := make([]*tally, instances)
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	for i := range instances {
		tl := &tally{}
		tallies[i] = tl
		obs := sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) {
			if e.Operation != "PurgeEvery" {
				return
			}
			tl.mu.Lock()
			defer tl.mu.Unlock()
			switch e.Status {
			case sqlonce.EventFirstRun:
				tl.purged++
				tl.rows += e.Rows
			case sqlonce.EventAlreadyDone:
				tl.skipped++
			default:
				if !errors.Is(e.Err, context.Canceled) {
					tl.errs = append(tl.errs, fmt.Errorf("outcome %v: %w", e.Status, e.Err))
				}
			}
		})
		s, err := dedupe.New(sqlonce.Observe(testdrv.MySQL(t, open(t, c.DSN(vitess.Keyspace, single))), obs))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.PurgeEvery(pctx, interval)
		}()
	}
	snapshot := func() (purged, skipped []int, rows int64, errs []error) {
		for _, tl := range tallies {
			tl.mu.Lock()
			purged, skipped = append(purged, tl.purged), append(skipped, tl.skipped)
			rows += tl.rows
			errs = append(errs, tl.errs...)
			tl.mu.Unlock()
		}
		return
	}
	// done waits until no expired key of this test is left, failing at
	// the first round that fails.
	done := func(what string) {
		t.Helper()
		waitFor(t, ctx, what, func() (int, bool) {
			if _, _, _, errs := snapshot(); len(errs) > 0 {
				stop()
				wg.Wait()
				t.Fatalf("%s: a PurgeEvery round failed: %v", what, errs[0])
			}
			n := count(t, db, expiredKeys, base, base+tenants)
			return n, n == 0
		})
	}
	done("PurgeEvery to purge the expired keys")
	fill("b")
	expired += tenants * 3
	done("PurgeEvery's later rounds to purge the keys expired since")
	// Let each instance play a few more rounds against the holder.
	waitFor(t, ctx, "more rounds", func() (int, bool) {
		purged, skipped, _, _ := snapshot()
		n := 0
		for i := range purged {
			n += purged[i] + skipped[i]
		}
		return n, n >= 4*instances
	})
	stop()
	wg.Wait()

	purged, skipped, rows, errs := snapshot()
	for _, err := range errs {
		t.Errorf("a PurgeEvery round failed: %v", err)
	}
	holders := 0
	for i := range purged {
		if purged[i] > 0 {
			holders++
		}
	}
	if holders != 1 {
		t.Errorf("rounds that purged per instance %v (skipped %v): want one instance holding the lease", purged, skipped)
	}
	if left := count(t, db, expiredKeys, base, base+tenants); left != 0 {
		t.Errorf("%d expired keys left", left)
	}
	if after := count(t, db, liveKeys, base, base+tenants); after != live+tenants*2 {
		t.Errorf("live keys: %d, want %d (%d before the second fill, plus %d)", after, live+tenants*2, live, tenants*2)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM sqlonce_keys WHERE namespace = 3"); n != 1 {
		t.Errorf("%d purger lease rows, want 1", n)
	}
	t.Logf("%d instances: rounds that purged %v, skipped %v; %d keys deleted in all (%d of this test expired, %v per shard in the first fill)",
		instances, purged, skipped, rows, expired, perShard)
}

// waitFor polls cond until it reports true, failing t when ctx ends
// first; it returns cond's last figure.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (int, bool)) int {
	t.Helper()
	for {
		n, ok := cond()
		if ok {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last figure %d)", what, ctx.Err(), n)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
