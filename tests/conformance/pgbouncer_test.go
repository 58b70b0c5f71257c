package conformance

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// The suite through a real PgBouncer 1.18 in transaction pooling mode,
// started for the package (tests/internal/pgbouncer) and stopped by
// TestMain. pgx runs in a query exec mode that keeps no named statement
// across transactions (pgx's default, cache_statement, cannot work through
// a transaction pooler); lib/pq's unnamed statements need nothing. Each
// configuration has a bouncer of its own and runs in parallel with the
// others. -short leaves them to make test: a bouncer is a proxy in front
// of a server kind -short runs directly.

func TestPgBouncer(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.PgBouncerPgx("exec")) }

func TestPgBouncerCacheDescribe(t *testing.T) {
	testdb.Long(t)
	t.Parallel()
	Run(t, harness.PgBouncerPgx("cache_describe"))
}

func TestPgBouncerSQL(t *testing.T) {
	testdb.Long(t)
	t.Parallel()
	Run(t, harness.PgBouncerSQL("pgx"))
}

func TestPgBouncerPQ(t *testing.T) {
	testdb.Long(t)
	t.Parallel()
	Run(t, harness.PgBouncerSQL("postgres"))
}

func TestMain(m *testing.M) {
	flag.Parse()
	parallelGroups = testing.Short()
	if testing.Short() {
		Racers = 16
	}
	dropKept := harness.KeepSchemas()
	code := m.Run()
	if err := dropKept(); err != nil {
		fmt.Fprintf(os.Stderr, "dropping the kept schemas: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	pgbouncer.Stop()
	vitess.StopShared()
	os.Exit(code)
}
