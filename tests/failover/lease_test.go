package failover

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

const leases = 20

// leaseRun claims leases on the primary (the outside work "done"), kills
// the primary with SIGKILL, promotes the standby and completes every
// lease on it through the same multi-host pool. With lagging, the
// standby's WAL receiver is stopped before the claims (primary_conninfo
// emptied): the asynchronous window made as wide as the claims. It
// reports the leases completed, those answered ErrLeaseLost, and how many
// of those the new primary let be claimed again (the outside work would
// run a second time).
func leaseRun(t *testing.T, synchronous, lagging bool) (completed, lost, claimedAgain int) {
	primary, standby := pgCluster(t, synchronous)
	migrate(t, primary.DSN)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if lagging {
		// The standby lags the claims, not the schema: stopped before it
		// replayed the migrations, the new primary would have no tables
		// (or an older version of them) to complete a lease in.
		waitReplayed(t, primary, standby)
		c, err := pgx.Connect(ctx, standby.DSN)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		c.Close(ctx)
		waitFor(t, "the standby to stop streaming", func(ctx context.Context) (bool, error) {
			var n int
			err := queryRow(ctx, primary.DSN, "SELECT count(*) FROM pg_stat_replication", &n)
			return n == 0, err
		})
	}
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=10",
		primary.Port, standby.Port)
	pool := pgPool(t, dsn, 4)
	store, err := dedupe.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	var held []*dedupe.Lease
	for i := range leases {
		l, res, err := store.Claim(ctx, dedupe.Request{Scope: "s", Key: fmt.Sprintf("lease-%d", i)}, 10*time.Minute)
		if err != nil || res.Outcome != sqlonce.FirstRun {
			t.Fatalf("claim %d: %v, %v", i, res.Outcome, err)
		}
		held = append(held, l)
	}
	// The outside work is done; the primary dies before the Completes.
	if err := primary.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	waitFor(t, "the pool reaching the new primary", func(ctx context.Context) (bool, error) {
		return true, pool.Ping(ctx)
	})
	for i, l := range held {
		switch err := store.Complete(ctx, l, []byte("done")); {
		case err == nil:
			completed++
		case errors.Is(err, sqlonce.ErrLeaseLost):
			lost++
			_, res, err := store.Claim(ctx, dedupe.Request{Scope: "s", Key: fmt.Sprintf("lease-%d", i)}, time.Minute)
			if err != nil {
				t.Fatalf("claim again %d: %v", i, err)
			}
			if res.Outcome == sqlonce.FirstRun {
				claimedAgain++
			}
		default:
			t.Fatalf("complete %d on the new primary: %v", i, err)
		}
	}
	t.Logf("leases claimed on the old primary: %d; completed on the new one: %d; ErrLeaseLost: %d, claimed again: %d",
		leases, completed, lost, claimedAgain)
	return completed, lost, claimedAgain
}

// TestLeaseAcrossFailoverSync: with synchronous replication, a lease
// claimed on the old primary is completed on the new one.
func TestLeaseAcrossFailoverSync(t *testing.T) {
	testdb.Long(t)
	if completed, _, _ := leaseRun(t, true, false); completed != leases {
		t.Errorf("%d of %d leases completed on the new primary", completed, leases)
	}
}

// TestLeaseAcrossFailoverAsyncLagging: with asynchronous replication and
// a standby that had not received the claims, Complete on the new primary
// answers ErrLeaseLost, and the key can be claimed again: the outside
// work runs a second time. The docs' window, made certain.
func TestLeaseAcrossFailoverAsyncLagging(t *testing.T) {
	testdb.Long(t)
	if _, lost, again := leaseRun(t, false, true); lost != leases || again != leases {
		t.Errorf("lagging standby: %d of %d leases lost, %d claimed again; want all", lost, leases, again)
	}
}
