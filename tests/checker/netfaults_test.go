package checker_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// throughProxy returns db seen through a fault proxy of its own, started
// in the test process on a free loopback port: the checker's network
// faults (reply to COMMIT lost, COMMIT lost, half-open connections) cut
// that pool's connections. The checker reads the database back directly.
func throughProxy[TTx any](t *testing.T, db harness.DB[TTx]) (harness.DB[TTx], *faultproxy.Proxy) {
	t.Helper()
	var (
		d      faultproxy.Dialect
		target string
	)
	switch db.Dialect() {
	case "postgres":
		cfg, err := pgx.ParseConfig(db.DSN())
		if err != nil {
			t.Fatal(err)
		}
		d, target = faultproxy.Postgres, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	case "mysql":
		cfg, err := mysql.ParseDSN(db.DSN())
		if err != nil {
			t.Fatal(err)
		}
		d, target = faultproxy.MySQL, cfg.Addr
	default:
		t.Fatalf("no network faults on %s", db.Dialect())
	}
	p := faultproxy.Start(t, d, target, checker.HalfOpenHold)
	via, err := harness.Reopen(t, db, poolSize, harness.Settings{Addr: p.Addr()})
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	return via, p
}

// netFaultsSeen fails t unless every network fault fired and some
// unknown commit was resolved: a run that cut nothing proved nothing.
func netFaultsSeen(t *testing.T, rep *checker.Report, p *faultproxy.Proxy) {
	t.Helper()
	c := p.Counts()
	t.Logf("proxy: %d connections, %d COMMITs; fired: reply lost %d, COMMIT lost %d, half-open delivered %d, half-open dropped %d; %d answers awaited in vain",
		c.Conns, c.Commits, c.Fired[faultproxy.LoseReply], c.Fired[faultproxy.LoseCommit],
		c.Fired[faultproxy.HalfOpenDeliver], c.Fired[faultproxy.HalfOpenDrop], c.Timeouts)
	// That every fault fired is asked of a run at full length: -short's
	// fifth of it (make test-short) may see too few commits, and then
	// says so without failing; violations fail it all the same.
	missing := t.Errorf
	if testing.Short() {
		missing = t.Logf
	}
	for _, f := range proxyFaults {
		if c.Fired[f] == 0 {
			missing("the proxy never fired %q", f)
		}
	}
	if rep.UnknownCommitted() == 0 {
		missing("no unknown commit was resolved as committed: the reply-lost fault proved nothing")
	}
}

// proxyFaults are the faults netFaultsSeen asks to have fired.
var proxyFaults = []faultproxy.Fault{faultproxy.LoseReply, faultproxy.LoseCommit, faultproxy.HalfOpenDeliver, faultproxy.HalfOpenDrop}

// allNetFaultsFired reports whether p fired each of proxyFaults: the
// checker's Enough, which makes a run on a loaded machine (fewer COMMITs
// in its time) go on until the half-open faults, picked at random between
// dropped and delivered, have fired both ways.
func allNetFaultsFired(p *faultproxy.Proxy) bool {
	c := p.Counts()
	for _, f := range proxyFaults {
		if c.Fired[f] == 0 {
			return false
		}
	}
	return true
}

// TestEnoughOutlastsAShortRun runs the network faults for far less time than
// they need to fire both ways (a fifth of a second), with Enough asking for them
// all: the run goes on until they fired, as a full-length run on a loaded
// machine does when it committed too little in its ten seconds.
func TestEnoughOutlastsAShortRun(t *testing.T) {
	db, p := throughProxy(t, harness.Postgres(t, poolSize))
	const short = 200 * time.Millisecond
	rep := checker.Run(t, db, checker.Config[pgx.Tx]{
		Ops: checker.Ops(t, db.Dialect()), Duration: short, Proxy: p,
		Enough: func() bool { return allNetFaultsFired(p) },
	})
	if len(rep.Violations) > 0 {
		rep.Log(t.Logf, 50)
		t.Errorf("%d violations of exactly-once", len(rep.Violations))
	}
	if !allNetFaultsFired(p) {
		c := p.Counts()
		t.Errorf("after %v (Duration %v), fired: %v", rep.Elapsed, short, c.Fired)
	}
	t.Logf("every network fault fired after %v", rep.Elapsed.Round(time.Millisecond))
}
