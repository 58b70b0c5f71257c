package mysqldriver

import (
	"errors"
	"fmt"
	"testing"

	sqdriver "github.com/sqlonce/sqlonce/internal/driver"
)

// The messages below are vtgate v0.24's, as it answered through
// go-sql-driver/mysql (tests/vitess meets each of the first three).
const (
	vtDupMsg      = `target: ks.-80.primary: vttablet: rpc error: code = AlreadyExists desc = Duplicate entry '\x00\x00t1-k' for key 'PRIMARY' (errno 1062) (sqlstate 23000) (CallerID: userData1): Sql: "insert into sqlonce_keys(namespace, scope) values (:v1, :v2)", BindVars: {v1: "type:INT64 value:\"0\""}`
	vtMultiDBMsg  = `multi-db transaction attempted: [keyspace:"ks" shard:"-80" tablet_type:PRIMARY transaction_id:1764199447064617541 tablet_alias:{cell:"test" uid:1}]`
	vtDeadlockMsg = `target: ks.80-.primary: vttablet: rpc error: code = Aborted desc = Deadlock found when trying to get lock; try restarting transaction (errno 1213) (sqlstate 40001) (CallerID: userData1): Sql: "update t set v = 1", BindVars: {}`
	vtTxKilledMsg = `target: ks.-80.primary: vttablet: rpc error: code = Aborted desc = transaction 1764199447064617541: ended at 2026-11-26 22:00:00.000 UTC (exceeded timeout: 30s) (CallerID: userData1)`
	// The transaction killer took a shard's transaction while a statement
	// of it was running (seen in CI: a 16 MB response recorded for over
	// vttablet's 30 s transaction timeout on a loaded machine).
	vtTxKillerInUseMsg  = `target: ks.80-.primary: vttablet: rpc error: code = Aborted desc = transaction 1795752487172451995: in use: in use: for tx killer rollback (CallerID: userData1)`
	vtStaleSavepointMsg = `target: ks.-80.primary: vttablet: rpc error: code = Unknown desc = SAVEPOINT sqlonce_sp_315 does not exist (errno 1305) (sqlstate 42000) (CallerID: userData1): Sql: "begin", BindVars: {}`
	vtLostMsg           = `target: ks.-80.primary: vttablet: rpc error: code = Canceled desc = EOF (errno 2013) (sqlstate HY000) (CallerID: userData1): Sql: "insert into orders(tenant_id, order_id, amount) values (:v1, :v2, 1)", BindVars: {}`
	vtGoneMsg           = `target: ks.-80.primary: vttablet: rpc error: code = Unavailable desc = conn 123: Write(packet) failed: write unix @->/tmp/vt/mysql.sock: write: broken pipe (errno 2006) (sqlstate HY000) (CallerID: userData1)`
	vtNoTabletMsg       = `target: ks.80-.primary: no healthy tablet available for 'keyspace:"ks" shard:"80-" tablet_type:PRIMARY'`
)

func TestClassifyVtgate(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want sqdriver.Class
	}{
		{"duplicate", myErr(errDupEntry, vtDupMsg), sqdriver.Unique},
		{"deadlock", myErr(errDeadlock, vtDeadlockMsg), sqdriver.Retryable | sqdriver.TxRolledBack},
		{"multi-db", myErr(errQueryInterrupted, vtMultiDBMsg), sqdriver.TxRolledBack},
		{"multi-db wrapped", fmt.Errorf("work: %w", myErr(errQueryInterrupted, vtMultiDBMsg)), sqdriver.TxRolledBack},
		{"tablet ended the transaction", myErr(errQueryInterrupted, vtTxKilledMsg), sqdriver.Retryable | sqdriver.TxRolledBack},
		{"tx killer while a statement ran", myErr(errQueryInterrupted, vtTxKillerInUseMsg), sqdriver.Retryable | sqdriver.TxRolledBack},
		{"no tablet", myErr(errUnknown, vtNoTabletMsg), sqdriver.ConnLost | sqdriver.Retryable | sqdriver.TxRolledBack},
		// MariaDB's own 1317 (KILL QUERY, max_statement_time) leaves the
		// transaction as it was: not classified.
		{"mariadb query interrupted", myErr(errQueryInterrupted, "Query execution was interrupted"), 0},
		{"mariadb unknown error", myErr(errUnknown, "Unknown error"), 0},
		// A tablet's connection killed under the shard's transaction.
		{"tablet lost its connection", myErr(crServerLost, vtLostMsg), sqdriver.ConnLost | sqdriver.TxRolledBack},
		{"tablet's connection gone", myErr(crServerGone, vtGoneMsg), sqdriver.ConnLost | sqdriver.TxRolledBack},
		// A savepoint of an earlier transaction vtgate replayed at the
		// begin of the next (tests/conformance TestVitess,
		// Unique/Insert/Race/SERIALIZABLE): retryable, nothing was done.
		{"stale savepoint at begin", myErr(errSpNotExist, vtStaleSavepointMsg), sqdriver.Retryable | sqdriver.TxRolledBack},
		// MariaDB's own: a ROLLBACK TO a savepoint the transaction does not
		// have (after a deadlock ended it), not classified.
		{"mariadb savepoint does not exist", myErr(errSpNotExist, "SAVEPOINT sp1 does not exist"), 0},
		{"vtgate rollback to a missing savepoint", myErr(errSpNotExist, "SAVEPOINT does not exist: ROLLBACK TO SAVEPOINT sp1"), 0},
		// The claim found gone after the work: as the refusal it most
		// likely follows, not retryable.
		{"claim gone after the work", fmt.Errorf("dedupe: %w", errVtgateClaimGone), sqdriver.TxRolledBack},
		{"transaction gone after the work", fmt.Errorf("dedupe: %w", errVtgateTxGone), sqdriver.TxRolledBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sqdriver.Classify(tc.err); got != tc.want {
				t.Fatalf("Classify = %b, want %b", got, tc.want)
			}
		})
	}
}

func TestIsCrossShard(t *testing.T) {
	cross := myErr(errQueryInterrupted, vtMultiDBMsg)
	if !IsCrossShard(cross) || !IsCrossShard(errors.Join(errors.New("x"), fmt.Errorf("w: %w", cross))) {
		t.Fatal("vtgate's multi-db refusal not recognised")
	}
	if !IsCrossShard(fmt.Errorf("dedupe: %w", errVtgateClaimGone)) {
		t.Fatal("the claim found gone after the work not recognised")
	}
	if !IsCrossShard(fmt.Errorf("dedupe: %w", errVtgateTxGone)) {
		t.Fatal("the transaction found gone after the work not recognised")
	}
	for _, err := range []error{nil, errors.New(vtMultiDBMsg), myErr(errQueryInterrupted, "Query execution was interrupted"), myErr(errQueryInterrupted, vtTxKilledMsg)} {
		if IsCrossShard(err) {
			t.Fatalf("IsCrossShard(%v) = true", err)
		}
	}
}

// TestDuplicateThroughVtgate: vtgate's wrapped 1062 names its key before
// the " (errno 1062)" it appends, not at the message's end.
func TestDuplicateThroughVtgate(t *testing.T) {
	if got := duplicateKeyName(vtDupMsg); got != "PRIMARY" {
		t.Fatalf("duplicateKeyName = %q, want PRIMARY", got)
	}
	if !duplicate(myErr(errDupEntry, vtDupMsg), "PRIMARY") || duplicate(myErr(errDupEntry, vtDupMsg), "orders_code_key") {
		t.Fatal("duplicate on the named key not judged")
	}
	// A value quoting vtgate's marker does not move the name: the server's
	// message comes first.
	tricky := `target: ks.-80.primary: vttablet: rpc error: code = AlreadyExists desc = Duplicate entry 'x' for key 'orders_code_key' (errno 1062) (sqlstate 23000) (CallerID: u): Sql: "insert", BindVars: {v1: "a' for key 'PRIMARY' (errno 1062) (sqlstate 23000)"}`
	if got := duplicateKeyName(tricky); got != "orders_code_key" {
		t.Fatalf("duplicateKeyName = %q, want orders_code_key", got)
	}
}

func TestIsVtgate(t *testing.T) {
	for v, want := range map[string]bool{"8.4.6-Vitess": true, "8.0.40-Vitess": true, "10.11.14-MariaDB-0+deb12u2": false, "8.4.6": false, "": false} {
		if isVtgate(v) != want {
			t.Errorf("isVtgate(%q) = %v", v, !want)
		}
	}
}

// TestBatchShapeRefusedByVtgate: through a session pinned to one shard
// the driver takes vtgate for MariaDB (vtgate passes the probe on to the
// tablet) and sends the batch claim's INSERT ... RETURNING, which vtgate's
// parser refuses with 1105, not 1064. The batch then falls back to the
// per-key claims it makes on vtgate (the other shapes do not hold there
// either), as it falls back to the next shape when MariaDB itself lacks
// one; before, every batch claim there failed with the parser's error.
func TestBatchShapeRefusedByVtgate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
		next    int32
	}{
		{"mariadb parse error", myErr(errParse, "You have an error in your SQL syntax"), true, shapeJSONTable},
		{"vtgate parse error", myErr(errUnknown, "syntax error at position 659 near 'RETURNING'"), true, shapePerKey},
		{"vtgate parse error, wrapped", fmt.Errorf("claim: %w", myErr(errUnknown, "syntax error at position 12 near 'JSON_TABLE'")), true, shapePerKey},
		{"other 1105", myErr(errUnknown, "Unknown error"), false, shapeReturning},
		{"vtgate unavailable", myErr(errUnknown, vtNoTabletMsg), false, shapeReturning},
		{"duplicate", myErr(1062, "Duplicate entry 'a' for key 'PRIMARY'"), false, shapeReturning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c batchShape
			if got := c.refusedBy(tc.err, shapeReturning); got != tc.refused {
				t.Fatalf("refusedBy(%v) = %v, want %v", tc.err, got, tc.refused)
			}
			want := tc.next
			if got := c.first.Load(); got != want {
				t.Errorf("first shape %d, want %d", got, want)
			}
		})
	}
}
