package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func TestPostgres(t *testing.T) { Run(t, harness.Postgres) }

func TestMySQL(t *testing.T) { Run(t, harness.MySQL) }

func TestSQLite(t *testing.T) { Run(t, harness.SQLite) }
