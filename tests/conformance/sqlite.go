package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// Why a case cannot run on SQLite. SQLite runs one writing transaction at
// a time, on the whole database, and the harness's Default transactions
// take its write lock at BEGIN (BEGIN IMMEDIATE, as the SQLite openers set
// up): a second one waits at BEGIN until the first ends.
const (
	// sqliteTwoWriters: the case holds two Default transactions open at
	// once in one goroutine; the second BEGIN would wait for the first to
	// end, which it never does.
	sqliteTwoWriters = "SQLite admits one writing transaction at a time: under BEGIN IMMEDIATE the case's second open transaction waits at BEGIN for the first, which only the same goroutine could end"
	// sqliteNoRowLocks: the case needs two transactions each holding a
	// row lock the other wants.
	sqliteNoRowLocks = "SQLite locks the whole database, never rows: two transactions cannot each hold a lock the other waits for, so there is no deadlock to provoke"
	// sqliteNoKeyWait: no-wait and bounded-wait claims.
	sqliteNoKeyWait = "SQLite has no per-key lock: a transaction holding a claimed key holds the database's write lock, so a duplicate waits at BEGIN IMMEDIATE (busy_timeout), before any claim runs; there is no claim-time wait to bound or report as in progress"
	// sqliteNoRace: the select-then-insert anti-pattern.
	sqliteNoRace = "SQLite is always SERIALIZABLE: under BEGIN IMMEDIATE the racers run one after another, and a DEFERRED racer whose check went stale fails with SQLITE_BUSY instead of inserting, so select-then-insert cannot write a duplicate and there is no race to show"
)

// skipOnSQLite skips t on SQLite, saying why.
func skipOnSQLite[TTx any](t *testing.T, db harness.DB[TTx], why string) {
	t.Helper()
	if db.Dialect() == "sqlite" {
		t.Skip(why)
	}
}

// sqliteDriverName is the database/sql driver name that opens db's DSN:
// the SQLite library db runs on.
func sqliteDriverName[TTx any](db harness.DB[TTx]) string {
	return any(db).(interface{ SQLDriverName() string }).SQLDriverName()
}

// constraintText is how db's duplicate-key error names a constraint of the
// orders table: by its name, except on SQLite, which names the index's
// columns.
func constraintText[TTx any](db harness.DB[TTx], constraint string) string {
	if db.Dialect() != "sqlite" {
		return constraint
	}
	return map[string]string{
		"orders_code_key":    "orders.code",
		"orders_ref_key":     "orders.customer, orders.amount",
		"shipments_code_key": "shipments.code",
	}[constraint]
}
