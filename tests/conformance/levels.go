package conformance

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// StrictSnapshot names the level runLevels adds to harness.Isolations:
// REPEATABLE READ where a write to a row changed after the snapshot fails
// instead of going ahead on the newest version. PostgreSQL's REPEATABLE
// READ always works so (40001). MariaDB does with innodb_snapshot_isolation
// =ON, its default from 11.6, and then reports 1020 "Record has changed
// since last read", which must count as retryable too.
const StrictSnapshot = "REPEATABLE READ, strict snapshot"

// runLevels runs fn in a subtest per isolation level, each on a database
// of its own with maxConns connections already open, plus StrictSnapshot. On a server
// that has no such setting (MySQL 8) that subtest is skipped.
//
// A level that runs exactly as another on a dialect is not run twice:
// SQLite begins READ COMMITTED, REPEATABLE READ and SERIALIZABLE alike,
// DEFERRED (harness.SQLite), so it runs the first of them only; and
// PostgreSQL's REPEATABLE READ is the strict snapshot already (a write to
// a row changed after the snapshot fails with 40001), so StrictSnapshot
// runs on MariaDB only, where it is a setting of its own.
func runLevels[TTx any](t *testing.T, f harness.Factory[TTx], maxConns int, fn func(t *testing.T, db harness.DB[TTx], iso harness.Isolation)) {
	for i, iso := range harness.Isolations {
		t.Run(string(iso), func(t *testing.T) {
			db := f(t, maxConns)
			if i > 0 && db.Dialect() == "sqlite" {
				t.Skipf("SQLite begins %s as %s, DEFERRED: run there", iso, harness.Isolations[0])
			}
			warm(t, db, maxConns)
			fn(t, db, iso)
		})
	}
	t.Run(StrictSnapshot, func(t *testing.T) {
		db := f(t, 1)
		if db.Dialect() != "mysql" {
			t.Skipf("%s's %s is the strict snapshot already (SQLite's levels are one)", db.Dialect(), harness.RepeatableRead)
		}
		db = strictSnapshot(t, db, maxConns)
		warm(t, db, maxConns)
		fn(t, db, harness.RepeatableRead)
	})
}

// strictSnapshot returns db through a pool whose REPEATABLE READ refuses
// writes to rows changed after the snapshot.
func strictSnapshot[TTx any](t *testing.T, db harness.DB[TTx], maxConns int) harness.DB[TTx] {
	t.Helper()
	strict, err := harness.Reopen(t, db, maxConns, harness.Settings{
		MySQL: map[string]string{"innodb_snapshot_isolation": "ON"},
	})
	if err != nil {
		if db.Dialect() == "mysql" {
			t.Skipf("server has no innodb_snapshot_isolation (MariaDB 10.6.18+/10.11.8+ only): %v", err)
		}
		t.Fatal(err)
	}
	return strict
}

// warm opens n connections in db's pool before a race, by holding n
// transactions open at once. Pools connect lazily: without this the first
// racers finish while the others are still connecting, and the race is
// one in name only. Once open, the pools keep their connections, so the
// racers never connect.
//
// A server that has no room for more connections (other test processes
// share it) is waited for, up to a limit: that is the environment, not
// the behaviour under test.
func warm[TTx any](t *testing.T, db harness.DB[TTx], n int) {
	t.Helper()
	ctx := ctxT(t)
	if w, ok := db.(harness.Warmer); ok {
		must(t, w.Warm(ctx, n))
		return
	}
	var all sync.WaitGroup
	all.Add(n)
	errs := race(n, func(int) error {
		var (
			tx  TTx
			err error
		)
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			tx, err = db.Begin(ctx, harness.Default)
			if err == nil || !serverFull(err) || ctx.Err() != nil {
				break
			}
			time.Sleep(wait)
		}
		all.Done()
		if err != nil {
			return err
		}
		all.Wait()
		return db.Rollback(ctx, tx)
	})
	noErrors(t, errs)
}

// serverFull reports whether err is a refused connection because the server
// is at max_connections.
func serverFull(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code == "53300" // too_many_connections
	}
	if myErr, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return myErr.Number == 1040 // ER_CON_COUNT_ERROR
	}
	return false
}
