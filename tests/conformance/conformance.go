// Package conformance is the shared test suite: every case is written once,
// generic over the transaction type, and run against every database
// (river's shared driver suite is the model). conformance_test.go runs it on
// PostgreSQL (pgx) and MySQL/MariaDB (database/sql).
package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// Run runs the whole suite against the databases f creates.
func Run[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("Dedupe", func(t *testing.T) { runDedupe(t, f) })
}
