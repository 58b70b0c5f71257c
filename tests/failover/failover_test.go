package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// The failover run's size: acknowledged keys before the kill and after
// the promotion, and workers.
const (
	workers     = 6
	ackedBefore = 400
	ackedAfter  = 200
)

// ledger tracks what the clients were told.
type ledger struct {
	mu sync.Mutex
	// firstRuns counts the FirstRun answers per key, acked every
	// acknowledged key, in the order told.
	firstRuns map[string]int
	acked     map[string]bool
	n         atomic.Int64 // acknowledged answers
	// runAgain: keys answered FirstRun after an earlier answer
	// (FirstRun or AlreadyDone) for the same key: the first was lost.
	runAgain []string
	unknown  atomic.Int64 // errors matching ErrCommitUnknown
	failed   atomic.Int64 // other errors, each resent
}

func (l *ledger) told(key string, res sqlonce.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if res.Outcome == sqlonce.FirstRun {
		if l.acked[key] {
			l.runAgain = append(l.runAgain, key)
		}
		l.firstRuns[key]++
	}
	l.acked[key] = true
	l.n.Add(1)
}

// failoverCounts is what the promoted standby holds after the run.
type failoverCounts struct {
	Keys, Effects, Duplicated, KeysWithoutEffect, EffectsWithoutKey int
	// AckedLost: keys a client was told about (FirstRun or AlreadyDone)
	// whose effect the new primary lacks at the end; RunAgain: keys told
	// FirstRun again after an earlier answer, their first effect lost
	// with the old primary and the resend run anew.
	Acked, AckedLost, RunAgain int
	// After the run, every answered key sent once more: ResendRan ran
	// again (its effect was lost), and no key may have two effects then.
	ResendRan, DuplicatedAfterResend int
	CommitUnknown, Resent            int64
	Downtime                         time.Duration
}

// failoverRun puts load on a primary through a multi-host DSN
// (target_session_attrs=read-write): workers run keys through Store.Run
// and Store.Do, each with a ledger row as its effect, and send every key
// twice (the second answer AlreadyDone) and every failed call again with
// the same key. After ackedBefore answers it kills the primary with
// SIGKILL and promotes the standby (pg_ctl promote); the clients go on
// against it, and after ackedAfter more answers the run stops and the new
// primary is counted.
func failoverRun(t *testing.T, synchronous bool) failoverCounts {
	primary, standby := pgCluster(t, synchronous)
	migrate(t, primary.DSN)
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=10",
		primary.Port, standby.Port)
	pool := pgPool(t, dsn, workers+2)
	store, err := dedupe.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// call sends one key once; Run for even workers, Do for odd ones.
	call := func(w int, key string) (sqlonce.Result, error) {
		effect := func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key)
			return err
		}
		req := dedupe.Request{Scope: "s", Key: key}
		if w%2 == 0 {
			return store.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				return nil, effect(ctx, tx)
			})
		}
		var res sqlonce.Result
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = store.Do(ctx, tx, req, func(ctx context.Context) error { return effect(ctx, tx) })
			return err
		})
		if err != nil {
			return sqlonce.Result{}, err
		}
		return res, nil
	}
	return runFailover(t, ctx, call, func() error { return primary.Stop(syscall.SIGKILL) }, func() {
		if err := standby.Promote(); err != nil {
			t.Fatal(err)
		}
	}, pgCount(standby.DSN), pgLedgerKeys(standby.DSN), "")
}

// pgCount is runFailover's count on the PostgreSQL server at dsn.
func pgCount(dsn string) func(q string) (int, error) {
	return func(q string) (int, error) {
		var n int
		err := queryRow(context.Background(), dsn, q, &n)
		return n, err
	}
}

// pgLedgerKeys is runFailover's ledgerKeys on the PostgreSQL server at
// dsn.
func pgLedgerKeys(dsn string) func() (map[string]bool, error) {
	return func() (map[string]bool, error) {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(context.Background(), "SELECT k FROM ledger")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		have := map[string]bool{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return nil, err
			}
			have[k] = true
		}
		return have, rows.Err()
	}
}

// runFailover runs the workers with call, kills the primary (kill) after
// ackedBefore answers, promotes the standby (promote), waits for
// ackedAfter more answers, stops, and counts with count (one integer a
// query) and ledgerKeys (the keys with an effect) on the new primary,
// whose tables are named with prefix.
func runFailover(t *testing.T, ctx context.Context, call func(w int, key string) (sqlonce.Result, error),
	kill func() error, promote func(), count func(q string) (int, error), ledgerKeys func() (map[string]bool, error), prefix string) failoverCounts {
	l := &ledger{firstRuns: map[string]int{}, acked: map[string]bool{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				for range 2 { // the request, then its duplicate
					for {
						res, err := call(w, key)
						if err == nil {
							l.told(key, res)
							break
						}
						if ctx.Err() != nil {
							return
						}
						if errors.Is(err, sqlonce.ErrCommitUnknown) {
							l.unknown.Add(1)
						} else {
							l.failed.Add(1)
						}
						time.Sleep(20 * time.Millisecond) // a client's pause before the resend
					}
				}
			}
		}()
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer finish()

	waitFor(t, fmt.Sprintf("%d answers before the kill", ackedBefore), func(context.Context) (bool, error) {
		return l.n.Load() >= ackedBefore, nil
	})
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	atKill := l.n.Load()
	promote()
	t.Logf("primary killed with SIGKILL at %d answers; standby promoted in %v", atKill, time.Since(killed).Round(time.Millisecond))
	var downtime time.Duration
	waitFor(t, "the first answers from the new primary", func(context.Context) (bool, error) {
		if l.n.Load() > atKill+int64(workers) {
			downtime = time.Since(killed)
			return true, nil
		}
		return false, nil
	})
	waitFor(t, fmt.Sprintf("%d answers after the promotion", ackedAfter), func(context.Context) (bool, error) {
		return l.n.Load() >= atKill+ackedAfter, nil
	})
	finish()
	if ctx.Err() != nil {
		t.Fatalf("the run took longer than its context: %v", ctx.Err())
	}

	// Count on the new primary.
	c := failoverCounts{CommitUnknown: l.unknown.Load(), Resent: l.failed.Load() + l.unknown.Load(), Downtime: downtime}
	keys, ledgerT := prefix+"sqlonce_keys", prefix+"ledger"
	for _, q := range []struct {
		dest *int
		q    string
	}{
		{&c.Keys, "SELECT count(*) FROM " + keys + " WHERE scope = 's'"},
		{&c.Effects, "SELECT count(*) FROM " + ledgerT},
		{&c.Duplicated, "SELECT count(*) FROM (SELECT k FROM " + ledgerT + " GROUP BY k HAVING count(*) > 1) d"},
		{&c.KeysWithoutEffect, "SELECT count(*) FROM " + keys + " s WHERE scope = 's' AND NOT EXISTS (SELECT 1 FROM " + ledgerT + " l WHERE l.k = s.idempotency_key)"},
		{&c.EffectsWithoutKey, "SELECT count(*) FROM " + ledgerT + " l WHERE NOT EXISTS (SELECT 1 FROM " + keys + " s WHERE s.scope = 's' AND s.idempotency_key = l.k)"},
	} {
		n, err := count(q.q)
		if err != nil {
			t.Fatalf("%s: %v", q.q, err)
		}
		*q.dest = n
	}
	have, err := ledgerKeys()
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	c.Acked = len(l.acked)
	var acked []string
	for k := range l.acked {
		acked = append(acked, k)
		if !have[k] {
			c.AckedLost++
		}
	}
	c.RunAgain = len(l.runAgain)
	l.mu.Unlock()

	// Every answered key sent once more, to the new primary: a key whose
	// effect was lost runs again (FirstRun), the rest answer AlreadyDone,
	// and still no key has two effects.
	for _, k := range acked {
		res, err := call(0, k)
		if err != nil {
			t.Fatalf("resend of %s to the new primary: %v", k, err)
		}
		if res.Outcome == sqlonce.FirstRun {
			c.ResendRan++
		}
	}
	n, err := count("SELECT count(*) FROM (SELECT k FROM " + ledgerT + " GROUP BY k HAVING count(*) > 1) d")
	if err != nil {
		t.Fatal(err)
	}
	c.DuplicatedAfterResend = n
	t.Logf("counts on the promoted standby: %+v", c)
	if c.Duplicated != 0 || c.KeysWithoutEffect != 0 || c.EffectsWithoutKey != 0 || c.DuplicatedAfterResend != 0 {
		t.Errorf("exactly once broken across the failover: %+v", c)
	}
	if c.ResendRan != c.AckedLost {
		t.Errorf("%d keys answered and lost, but %d run again when resent", c.AckedLost, c.ResendRan)
	}
	return c
}

// TestFailoverPostgresAsync: asynchronous streaming replication (the
// default). An answer whose commit had not reached the standby is lost
// with the old primary: the resend of its key runs it again (RunAgain),
// measured and logged; both or neither, never one effect twice.
func TestFailoverPostgresAsync(t *testing.T) {
	testdb.Long(t)
	c := failoverRun(t, false)
	t.Logf("async: %d keys answered; lost with the old primary: %d (%d of them resent and run again during the run, %d after it)",
		c.Acked, c.AckedLost+c.RunAgain, c.RunAgain, c.ResendRan)
}

// TestFailoverPostgresSync: synchronous replication
// (synchronous_standby_names=s1, synchronous_commit=on): no answer is
// lost.
func TestFailoverPostgresSync(t *testing.T) {
	testdb.Long(t)
	c := failoverRun(t, true)
	if c.AckedLost != 0 || c.RunAgain != 0 {
		t.Errorf("synchronous replication: %d keys answered on the old primary were lost, %d run again on the new one", c.AckedLost, c.RunAgain)
	}
}
