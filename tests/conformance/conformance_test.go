package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func TestPostgres(t *testing.T) { Run(t, harness.Postgres) }

func TestPostgresSQL(t *testing.T) { Run(t, harness.PostgresSQL) }

func TestPostgresPQ(t *testing.T) { Run(t, harness.PostgresPQ) }

func TestMySQL(t *testing.T) { Run(t, harness.MySQL) }

func TestSQLite(t *testing.T) { Run(t, harness.SQLite) }

// TestSQLiteMattn runs the suite on SQLite through mattn/go-sqlite3 (cgo),
// the other SQLite library sqlitedriver supports.
func TestSQLiteMattn(t *testing.T) { Run(t, harness.SQLiteMattn) }
