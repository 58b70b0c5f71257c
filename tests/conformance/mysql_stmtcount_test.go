package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestMySQLDriversSharePreparedStatements builds 200 drivers on one *sql.DB
// and runs a claim through each, as a service that builds a driver per
// request does. Each driver used to prepare its own statements, never
// closed: the server-wide Prepared_stmt_count rose by two per driver until
// max_prepared_stmt_count (16382 by default) refused every application on
// the server. Drivers on one handle now share one set.
//
// Prepared_stmt_count is the server's, so the case runs on a throwaway
// MariaDB of its own, where no other test prepares anything.
func TestMySQLDriversSharePreparedStatements(t *testing.T) {
	dsn := throwawayMariaDB(t)
	ctx := ctxT(t)
	admin, err := sql.Open("mysql", dsn)
	must(t, err)
	t.Cleanup(func() { admin.Close() })
	admin.SetMaxOpenConns(1)
	must(t, migrations.Up(ctx, admin, migrations.MySQL))
	count := func() int64 {
		t.Helper()
		var name string
		var n int64
		must(t, admin.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'").Scan(&name, &n))
		return n
	}

	// Two connections: the caller's transaction holds one, the other is
	// where the driver prepares its statements (a prepare never waits long
	// for a connection).
	const conns = 2
	db, err := sql.Open("mysql", dsn)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)

	// One claim through each of 200 drivers, each key new, each its own
	// transaction: the first-run path (INSERT, then nothing else).
	do := func(drivers int, prefix string) {
		t.Helper()
		for i := range drivers {
			s, err := dedupe.New(testdrv.MySQL(t, db))
			must(t, err)
			tx, err := db.BeginTx(ctx, nil)
			must(t, err)
			_, err = s.Do(ctx, tx, dedupe.Request{Scope: "stmts", Key: fmt.Sprintf("%s-%d", prefix, i)}, func(context.Context) error { return nil })
			must(t, err)
			must(t, tx.Commit())
		}
	}
	before := count()
	do(1, "warm")
	one := count() - before
	do(200, "k")
	all := count() - before
	t.Logf("Prepared_stmt_count: +%d after one driver, +%d after 201", one, all)
	// Each statement the claim runs is prepared at most once per connection
	// of the pool, whichever driver runs it: the count after 201 drivers
	// is bounded by the statements one driver prepares times the pool's
	// connections, not by the number of drivers (it was 2 per driver).
	if bound := max(one, 1) * conns; all > bound {
		t.Fatalf("Prepared_stmt_count rose by %d after 201 drivers on one *sql.DB; one driver prepared %d, bound %d (%d connections)", all, one, bound, conns)
	}
	if one == 0 {
		t.Fatal("the driver prepared nothing: the case no longer measures what it says")
	}

	// Once no driver on the handle is reachable, the shared statements are
	// closed and the server frees them; the handle stays usable.
	deadline := time.Now().Add(20 * time.Second)
	for count() > before {
		if time.Now().After(deadline) {
			t.Fatalf("Prepared_stmt_count still +%d after every driver was dropped", count()-before)
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	do(1, "again")
}
