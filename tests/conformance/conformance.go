// Package conformance is the shared test suite: every case is written once,
// generic over the transaction type, and run against every database
// (river's shared driver suite is the model). Run runs it on one
// configuration, a harness.Factory. This package's tests run it on
// PostgreSQL through pgx, pgx's database/sql adapter and lib/pq, on MariaDB
// (database/sql), on SQLite through modernc and mattn/go-sqlite3
// (conformance_test.go), on PgBouncer in transaction pooling four ways
// (pgbouncer_test.go) and on Vitess through vtgate (vitess_test.go);
// tests/galera runs it on a three-node Galera cluster. -short keeps
// PostgreSQL through pgx, MariaDB and modernc's SQLite. tests/README.md
// says how to add a case.
package conformance

import (
	"slices"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// parallelGroups runs the groups of a configuration in parallel: this
// package's TestMain sets it under -short (make test-short, the inner
// loop), where the machine has cores to spare and a configuration's time
// is mostly waiting (lock waits, deadlines, leases running out), so that
// it takes about as long as its slowest group. make test keeps one group
// at a time per configuration, the ten configurations side by side (the
// four PgBouncer ones would need more server connections than a bouncer
// has for their groups at once), as do other packages running the suite
// on shared servers (the Galera cluster).
var parallelGroups bool

func group(t *testing.T, name string, fn func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		if parallel(t) {
			t.Parallel()
		}
		fn(t)
	})
}

// part runs a part of a group that takes long on its own (a Favor of
// Store.Run, a form of unique's insert, an httpidem mode) as a subtest,
// in parallel with the group's other parts where the groups run in
// parallel (-short): the parts share nothing but the configuration, each
// creating its databases, and the slowest group then takes about as long
// as its slowest part. A group that has parts runs every case in one.
func part(t *testing.T, name string, fn func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		if parallel(t) {
			t.Parallel()
		}
		fn(t)
	})
}

// sequential names the configurations whose cases take turns on one
// set of tables (Vitess: the shards of one keyspace), never in parallel.
var sequential = []string{"TestVitess"}

// parallel reports whether t's group or part runs in parallel with the
// others of its configuration.
func parallel(t *testing.T) bool {
	if !parallelGroups {
		return false
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	return !slices.Contains(sequential, top)
}

// Run runs the whole suite against the databases f creates.
func Run[TTx any](t *testing.T, f harness.Factory[TTx]) {
	group(t, "Dedupe", func(t *testing.T) { runDedupe(t, f) })
	group(t, "DedupeReplay", func(t *testing.T) { runDedupeReplay(t, f) })
	group(t, "DedupeResponseNil", func(t *testing.T) { runDedupeResponseNil(t, f) })
	group(t, "DedupeSameTx", func(t *testing.T) { runDedupeSameTx(t, f) })
	group(t, "DedupeExpiry", func(t *testing.T) { runDedupeExpiry(t, f) })
	group(t, "DedupeNoWait", func(t *testing.T) { runDedupeNoWait(t, f) })
	group(t, "DedupeLease", func(t *testing.T) { runDedupeLease(t, f) })
	group(t, "DedupeLeaseDeadline", func(t *testing.T) { runDedupeLeaseDeadline(t, f) })
	group(t, "DedupeLeaseCallerDeadline", func(t *testing.T) { runDedupeLeaseCallerDeadline(t, f) })
	group(t, "DedupeRun", func(t *testing.T) { runDedupeRun(t, f) })
	group(t, "DedupeCodec", func(t *testing.T) { runDedupeCodec(t, f) })
	group(t, "DedupeKeys", func(t *testing.T) { runDedupeKeys(t, f) })
	group(t, "DedupePurger", func(t *testing.T) { runDedupePurger(t, f) })
	group(t, "DedupeSteps", func(t *testing.T) { runDedupeSteps(t, f) })
	group(t, "DedupeStepsRetry", func(t *testing.T) { runDedupeStepsRetry(t, f) })
	group(t, "DedupeAwait", func(t *testing.T) { runDedupeAwait(t, f) })
	group(t, "Optimistic", func(t *testing.T) { runOptimistic(t, f) })
	group(t, "StateMachine", func(t *testing.T) { runStateMachine(t, f) })
	group(t, "Unique", func(t *testing.T) { runUnique(t, f) })
	group(t, "AntiPattern", func(t *testing.T) { runAntiPattern(t, f) })
	group(t, "Token", func(t *testing.T) { runToken(t, f) })
	group(t, "HTTPIdem", func(t *testing.T) { runHTTPIdem(t, f) })
	group(t, "HTTPIdemSteps", func(t *testing.T) { runHTTPIdemSteps(t, f) })
	group(t, "GRPCIdem", func(t *testing.T) { runGRPCIdem(t, f) })
	group(t, "HTTPContract", func(t *testing.T) { runHTTPContract(t, f) })
	group(t, "Outbox", func(t *testing.T) { runOutbox(t, f) })
	group(t, "Inbox", func(t *testing.T) { runInbox(t, f) })
	group(t, "InboxBatch", func(t *testing.T) { runInboxBatch(t, f) })
	group(t, "NilTx", func(t *testing.T) { runNilTx(t, f) })
	group(t, "ZeroValues", func(t *testing.T) { runZeroValues(t, f) })
	group(t, "Observe", func(t *testing.T) { runObserve(t, f) })
	group(t, "Namespace", func(t *testing.T) { runNamespace(t, f) })
	group(t, "OutboxDriver", func(t *testing.T) { runOutboxDriver(t, f) })
}
