package conformance

import (
	"os"
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
)

// The suite through a real PgBouncer 1.18 in transaction pooling mode,
// started for the package (tests/internal/pgbouncer) and stopped by
// TestMain. pgx runs in a query exec mode that keeps no named statement
// across transactions (pgx's default, cache_statement, cannot work through
// a transaction pooler); lib/pq's unnamed statements need nothing.

func TestPgBouncer(t *testing.T) { Run(t, harness.PgBouncerPgx("exec")) }

func TestPgBouncerCacheDescribe(t *testing.T) { Run(t, harness.PgBouncerPgx("cache_describe")) }

func TestPgBouncerSQL(t *testing.T) { Run(t, harness.PgBouncerSQL("pgx")) }

func TestPgBouncerPQ(t *testing.T) { Run(t, harness.PgBouncerSQL("postgres")) }

func TestMain(m *testing.M) {
	code := m.Run()
	pgbouncer.Stop()
	os.Exit(code)
}
