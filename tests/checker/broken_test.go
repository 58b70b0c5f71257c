package checker_test

import (
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// The checker must not be a test that cannot fail: swapped in for the
// dedupe Store, strategies known to be broken must be caught.

func TestBrokenSelectThenInsertPostgres(t *testing.T) {
	brokenSelectThenInsert(t, harness.Postgres(t, poolSize))
}

func TestBrokenSelectThenInsertMySQL(t *testing.T) {
	brokenSelectThenInsert(t, harness.MySQL(t, poolSize))
}

// brokenSelectThenInsert: check the ledger for the key, insert if absent.
// Under READ COMMITTED two workers both see "absent".
func brokenSelectThenInsert[TTx any](t *testing.T, db harness.DB[TTx]) {
	rep := checker.Run(t, db, checker.Config[TTx]{
		Ops:        []string{checker.Do},
		Dedupe:     checker.SelectThenInsert[TTx](),
		Isolations: []harness.Isolation{harness.ReadCommitted},
		FaultRate:  -1,
		Duration:   2 * time.Second,
	})
	caught(t, rep, checker.VDuplicate, "select-then-insert")
}

func TestBrokenMarkerFirstPostgres(t *testing.T) {
	brokenMarkerFirst(t, harness.Postgres(t, poolSize))
}

func TestBrokenMarkerFirstMySQL(t *testing.T) {
	brokenMarkerFirst(t, harness.MySQL(t, poolSize))
}

// brokenMarkerFirst: the marker commits before the work. Any fault in the
// work loses the request for good.
func brokenMarkerFirst[TTx any](t *testing.T, db harness.DB[TTx]) {
	rep := checker.Run(t, db, checker.Config[TTx]{
		Ops:      []string{checker.Do, checker.DoResponse},
		Dedupe:   checker.MarkerFirst[TTx](),
		Duration: 2 * time.Second,
	})
	caught(t, rep, checker.VLost, "marker-first")
}

func TestBrokenMemoryMarkerPostgres(t *testing.T) {
	brokenMemoryMarker(t, harness.Postgres(t, poolSize))
}

func TestBrokenMemoryMarkerMySQL(t *testing.T) {
	brokenMemoryMarker(t, harness.MySQL(t, poolSize))
}

// brokenMemoryMarker: the key is marked outside the transaction as the
// work starts. Duplicates are told AlreadyDone before anything committed.
func brokenMemoryMarker[TTx any](t *testing.T, db harness.DB[TTx]) {
	rep := checker.Run(t, db, checker.Config[TTx]{
		Ops:      []string{checker.Do},
		Dedupe:   checker.MemoryMarker[TTx](),
		Duration: 2 * time.Second,
	})
	caught(t, rep, checker.VEarly, "memory marker")
}

func TestBrokenWorkThenMarkPostgres(t *testing.T) {
	brokenWorkThenMark(t, harness.Postgres(t, poolSize))
}

func TestBrokenWorkThenMarkMySQL(t *testing.T) {
	brokenWorkThenMark(t, harness.MySQL(t, poolSize))
}

// brokenWorkThenMark: swapped in for dedupe.Store.Run, the work commits in
// a transaction of its own before the key is recorded in another. Two runs
// of a key both find it absent and both do the work.
func brokenWorkThenMark[TTx any](t *testing.T, db harness.DB[TTx]) {
	rep := checker.Run(t, db, checker.Config[TTx]{
		Ops:       []string{checker.StoreRun},
		Run:       checker.WorkThenMark[TTx](),
		FaultRate: -1,
		Duration:  2 * time.Second,
	})
	caught(t, rep, checker.VDuplicate, "work-then-mark")
}

func caught(t *testing.T, rep *checker.Report, kind, what string) {
	t.Helper()
	t.Log(rep.Summary())
	vs := rep.Of(kind)
	if len(vs) == 0 {
		t.Errorf("%s ran %d attempts and the checker reported no %q violation", what, len(rep.Attempts), kind)
		return
	}
	t.Logf("caught %s: %d %q violations (of %d), e.g. %s", what, len(vs), kind, len(rep.Violations), vs[0])
}
