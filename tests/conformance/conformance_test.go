package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// Each configuration is a parallel top-level test: each case creates a
// schema or database of its own, so configurations share nothing but the
// servers, and most of a case's time is spent waiting (lock waits,
// deadlines, round trips). tests/run sets -parallel so that all ten run
// at once. Under -short, the configurations that differ from another only
// in a library (pgx's database/sql adapter, lib/pq, mattn's SQLite) and the
// PgBouncer ones are skipped (testdb.Long), and each kept configuration
// runs its groups in parallel (parallelGroups).

func TestPostgres(t *testing.T) { t.Parallel(); Run(t, harness.Postgres) }

func TestPostgresSQL(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.PostgresSQL) }

func TestPostgresPQ(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.PostgresPQ) }

func TestMySQL(t *testing.T) { t.Parallel(); Run(t, harness.MySQL) }

func TestSQLite(t *testing.T) { t.Parallel(); Run(t, harness.SQLite) }

// TestSQLiteMattn runs the suite on SQLite through mattn/go-sqlite3 (cgo),
// the other SQLite library sqlitedriver supports.
func TestSQLiteMattn(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.SQLiteMattn) }
