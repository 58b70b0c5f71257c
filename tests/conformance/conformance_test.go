package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// Each configuration is a parallel top-level test: each case creates a
// schema or database of its own, so configurations share nothing but the
// servers. tests/run sets -parallel so that all of them run at once; the
// machine's CPU is then their bound. Under -short, the configurations that
// differ from another only in a library (pgx's database/sql adapter,
// lib/pq, mattn's SQLite) and the PgBouncer ones are skipped
// (testdb.Long), and each kept configuration runs its groups in parallel
// (parallelGroups).
//
// Under make test every case runs in every configuration. Two
// configurations differ in a library (pgx, its database/sql adapter,
// lib/pq; modernc's or mattn's SQLite) or in a proxy (PgBouncer, four
// ways) that every case's statements pass through, and even the cases
// that refuse an argument before any SQL (NilTx) then read the database
// for what was written. The time went elsewhere: a schema migrated and
// a pool opened for every case (kept now: harness/kept.go), goose parsing
// the migrations for every SQLite and MySQL case (templates now: testdb),
// and modernc's SQLite run under the race detector (tests/run).

func TestPostgres(t *testing.T) { t.Parallel(); Run(t, harness.Postgres) }

func TestPostgresSQL(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.PostgresSQL) }

func TestPostgresPQ(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.PostgresPQ) }

func TestMySQL(t *testing.T) { t.Parallel(); Run(t, harness.MySQL) }

func TestSQLite(t *testing.T) { t.Parallel(); Run(t, harness.SQLite) }

// TestSQLiteMattn runs the suite on SQLite through mattn/go-sqlite3 (cgo),
// the other SQLite library sqlitedriver supports.
func TestSQLiteMattn(t *testing.T) { testdb.Long(t); t.Parallel(); Run(t, harness.SQLiteMattn) }
