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
	t.Run("DedupeReplay", func(t *testing.T) { runDedupeReplay(t, f) })
	t.Run("DedupeResponseNil", func(t *testing.T) { runDedupeResponseNil(t, f) })
	t.Run("DedupeSameTx", func(t *testing.T) { runDedupeSameTx(t, f) })
	t.Run("DedupeExpiry", func(t *testing.T) { runDedupeExpiry(t, f) })
	t.Run("DedupeNoWait", func(t *testing.T) { runDedupeNoWait(t, f) })
	t.Run("DedupeLease", func(t *testing.T) { runDedupeLease(t, f) })
	t.Run("DedupeLeaseDeadline", func(t *testing.T) { runDedupeLeaseDeadline(t, f) })
	t.Run("DedupeRun", func(t *testing.T) { runDedupeRun(t, f) })
	t.Run("Optimistic", func(t *testing.T) { runOptimistic(t, f) })
	t.Run("StateMachine", func(t *testing.T) { runStateMachine(t, f) })
	t.Run("Unique", func(t *testing.T) { runUnique(t, f) })
	t.Run("AntiPattern", func(t *testing.T) { runAntiPattern(t, f) })
	t.Run("Token", func(t *testing.T) { runToken(t, f) })
	t.Run("HTTPIdem", func(t *testing.T) { runHTTPIdem(t, f) })
	t.Run("GRPCIdem", func(t *testing.T) { runGRPCIdem(t, f) })
	t.Run("Inbox", func(t *testing.T) { runInbox(t, f) })
	t.Run("InboxBatch", func(t *testing.T) { runInboxBatch(t, f) })
	t.Run("NilTx", func(t *testing.T) { runNilTx(t, f) })
	t.Run("ZeroValues", func(t *testing.T) { runZeroValues(t, f) })
	t.Run("Observe", func(t *testing.T) { runObserve(t, f) })
	t.Run("Namespace", func(t *testing.T) { runNamespace(t, f) })
}
