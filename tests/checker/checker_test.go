package checker_test

import (
	"flag"
	"io"
	"log"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

var durationFlag = flag.Duration("checker.duration", 0, "run length of each checker workload (default 10s; or set "+checker.DurationEnv+")")

// poolSize leaves room for the kills and lease transactions that run next
// to the workers' own, without starving PostgreSQL's 100 connections
// shared with the other test packages.
const poolSize = 70

func init() {
	// Killed connections are the point here; the driver's log of each one
	// is noise. Set before any DSN is parsed: each connector keeps the
	// logger it was created with.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

// TestPostgres and TestMySQL run the workload through a fault proxy that
// cuts single connections at COMMIT and leaves some half-open
// (netfaults_test.go).
func TestPostgres(t *testing.T) {
	db, p := throughProxy(t, harness.Postgres(t, poolSize))
	rep := exactlyOnce(t, db, p)
	netFaultsSeen(t, rep, p)
}

// TestPostgresSQL and TestPostgresPQ run the workload through
// pgsqldriver, on database/sql with pgx's stdlib driver and with lib/pq.
func TestPostgresSQL(t *testing.T) {
	testdb.Long(t)
	db := harness.PostgresSQL(t, poolSize)
	exactlyOnce(t, db, nil)
}

func TestPostgresPQ(t *testing.T) {
	testdb.Long(t)
	db := harness.PostgresPQ(t, poolSize)
	exactlyOnce(t, db, nil)
}

func TestMySQL(t *testing.T) {
	db, p := throughProxy(t, harness.MySQL(t, poolSize))
	rep := exactlyOnce(t, db, p)
	netFaultsSeen(t, rep, p)
}

// TestSQLite runs the workload on one database file. Default transactions
// begin IMMEDIATE, as the SQLite openers set up; Serializable ones DEFERRED,
// which meet SQLITE_BUSY_SNAPSHOT and retry. Killing a connection from
// another session has no SQLite counterpart: those faults fail the work
// instead.
func TestSQLite(t *testing.T) {
	db := harness.SQLite(t, poolSize)
	exactlyOnce(t, db, nil, harness.Default, harness.Serializable)
}

// exactlyOnce runs the checker on db, with the network faults when p is
// set, and fails t on any violation.
func exactlyOnce[TTx any](t *testing.T, db harness.DB[TTx], p *faultproxy.Proxy, isolations ...harness.Isolation) *checker.Report {
	ops := checker.Ops(t, db.Dialect())
	cfg := checker.Config[TTx]{Ops: ops, Duration: checker.Duration(t, *durationFlag, 10*time.Second), Isolations: isolations, Proxy: p}
	if p != nil && !testing.Short() {
		// -short (make test-short) runs a fifth of the time and only
		// logs a fault that did not fire (netFaultsSeen).
		cfg.Enough = func() bool { return allNetFaultsFired(p) }
	}
	rep := checker.Run(t, db, cfg)
	rep.Log(t.Logf, 50)
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations of exactly-once", len(rep.Violations))
	}
	// A run that never reached Run's FirstRun and AlreadyDone checked
	// nothing of it.
	if slices.Contains(ops, checker.StoreRun) {
		if rc := rep.Run(); rc.FirstRun == 0 || rc.AlreadyDone == 0 {
			t.Errorf("dedupe.Store.Run was not exercised: %d attempts, %d FirstRun, %d AlreadyDone", rc.Attempts, rc.FirstRun, rc.AlreadyDone)
		}
	}
	return rep
}
