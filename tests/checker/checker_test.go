package checker_test

import (
	"flag"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
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

func TestPostgres(t *testing.T) {
	db := harness.Postgres(t, poolSize)
	exactlyOnce(t, db)
}

func TestMySQL(t *testing.T) {
	db := harness.MySQL(t, poolSize)
	exactlyOnce(t, db)
}

func exactlyOnce[TTx any](t *testing.T, db harness.DB[TTx]) {
	rep := checker.Run(t, db, checker.Config[TTx]{Ops: checker.Ops(t, db.Dialect()), Duration: checker.Duration(t, *durationFlag, 10*time.Second)})
	rep.Log(t.Logf, 50)
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations of exactly-once", len(rep.Violations))
	}
}
