package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
	"github.com/sqlonce/sqlonce/token"
)

// TestPurge: through vtgate a purge's one statement over every shard is
// refused (a DELETE ... ORDER BY ... LIMIT across shards), so the MySQL
// driver purges shard by shard. Keys and tokens of tenants on both shards,
// some expired and some live: dedupe's Purge and token's Purge in small
// batches, then PurgeEvery, delete every expired row and no live one; a
// PurgeTx in a caller's transaction is refused with
// sqlonce.ErrInvalidArgument, and on a handle whose database is one shard
// (keyspace:shard) it purges that shard.
func TestPurge(t *testing.T) {
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
	shortTok, err := token.New(mysqldriver.New(db), token.WithTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(mysqldriver.New(db))
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

	// PurgeEvery is not supported through vtgate yet: its batch's
	// transaction holds the lease's row while the shard's DELETE, in
	// autocommit on another connection, can wait for that row's lock
	// (1205 after innodb_lock_wait_timeout). See docs/deployments.md.

	// A handle on one shard purges in the caller's transaction.
	fill(9_720_000, "c")
	for _, shard := range []string{"-80", "80-"} {
		sdb := open(t, c.DSN(vitess.Keyspace+":"+shard, single))
		s, err := dedupe.New(mysqldriver.New(sdb))
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
