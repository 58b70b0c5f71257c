package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// Kept PostgreSQL schemas: a case of a PostgreSQL configuration gets a
// migrated schema with its handle already open, left by an earlier case
// of the same configuration and pool size, emptied; when it ends, its
// schema is emptied and kept for the next. A PostgreSQL connection costs
// ~40 ms of CPU on the CI machine (pgbench -C: a backend forked, ~750
// page faults and ~380 TLB flushes under the virtual machine), and a
// schema created, migrated and dropped ~120 ms: a case paid both for
// every one of its connections and its schema, thousands of cases per
// run. Emptying a kept schema is one TRUNCATE (~30 ms, no connection).
//
// A schema is kept only when its case leaves it as it found it: the case
// passed, none of its handle's connections is still in use, and the
// schema's shape (tables, columns, indexes, constraints, triggers,
// functions, sequences) is the migrated one; otherwise it is dropped, as
// before. Each case builds its sqlonce driver anew on the kept handle
// (the drivers keep no state per handle: a first call probes as in a new
// program), and its connections have no session state of the earlier
// case's: the suite sets settings per transaction (SET LOCAL) or on a
// handle of its own (Reopen, closed when the case ends). TRUNCATE ...
// RESTART IDENTITY leaves the tables as new: empty files, statistics of
// an empty table, sequences at their start.
//
// A test binary turns it on with KeepSchemas in its TestMain (the
// conformance suite does); SQLONCE_TEST_KEEP=0 turns it off: every case
// creates and drops its own schema and handle, as in the packages that
// do not turn it on (one that restarts the server keeps no handle across).
var kept struct {
	sync.Mutex
	on   bool
	free map[string][]*keptSchema // by configuration and pool size
	// idle counts the idle connections the waiting handles keep beyond
	// keepIdle each (idleBudget).
	idle int
}

// KeepSchemas turns kept schemas on for the test binary, unless
// SQLONCE_TEST_KEEP=0, and returns the function that drops them all: call
// it when the tests have run (TestMain).
func KeepSchemas() (dropAll func() error) {
	kept.Lock()
	kept.on = os.Getenv("SQLONCE_TEST_KEEP") != "0"
	kept.Unlock()
	return func() error {
		kept.Lock()
		defer kept.Unlock()
		kept.on = false
		var errs []error
		for _, ks := range kept.free {
			for _, k := range ks {
				errs = append(errs, k.drop())
			}
		}
		kept.free = nil
		return errors.Join(errs...)
	}
}

// keepSchemas reports whether kept schemas are on.
func keepSchemas() bool {
	kept.Lock()
	defer kept.Unlock()
	return kept.on
}

// keptSchema is a migrated schema and the handle a configuration opened
// on it.
type keptSchema struct {
	schema string
	// shape is the schema's shape as migrated (schemaShape).
	shape string
	// empty empties the schema's tables (TRUNCATE ... RESTART IDENTITY),
	// the goose version tables excepted.
	empty string
	// handle is the configuration's value (*pgDB or *pgSQLDB) without
	// its sqlonce driver.
	handle any
	// inUse counts the handle's connections in use.
	inUse func() int
	// idle closes the handle's idle connections but n when n >= 0 (a
	// case ended), and lets it keep its bound of idle connections again
	// when n < 0 (a case begins).
	idle func(n int)
	// maxIdle is the handle's bound of connections.
	maxIdle int
	// bounced: the handle's connections are a PgBouncer's clients, not
	// server connections (idleBudget does not bound them).
	bounced bool
	// extra is what k holds of idleBudget while it waits for a case.
	extra int
	// drop closes the handle and drops the schema.
	drop func() error
}

// keptFor returns a kept schema of configuration kind (its name and pool
// size), or one mk makes, and hands it back when t ends.
func keptFor(t testing.TB, kind string, mk func() *keptSchema) *keptSchema {
	t.Helper()
	if !keepSchemas() {
		k := mk()
		t.Cleanup(func() {
			if err := k.drop(); err != nil {
				t.Errorf("drop schema %s: %v", k.schema, err)
			}
		})
		return k
	}
	kept.Lock()
	var k *keptSchema
	if n := len(kept.free[kind]); n > 0 {
		k = kept.free[kind][n-1]
		kept.free[kind] = kept.free[kind][:n-1]
	}
	if k != nil {
		kept.idle -= k.extra
		k.extra = 0
	}
	kept.Unlock()
	if k != nil && k.idle != nil {
		k.idle(-1)
	}
	if k == nil {
		k = mk()
		admin := testdb.PostgresAdmin(t)
		shape, tables, err := schemaShape(context.Background(), admin, k.schema)
		if err != nil {
			_ = k.drop()
			t.Fatalf("schema %s: %v", k.schema, err)
		}
		k.shape = shape
		k.empty = "TRUNCATE " + strings.Join(tables, ", ") + " RESTART IDENTITY"
	}
	t.Cleanup(func() {
		why := k.keep(t)
		if why == "" {
			kept.Lock()
			if kept.on {
				if kept.free == nil {
					kept.free = map[string][]*keptSchema{}
				}
				kept.free[kind] = append(kept.free[kind], k)
				kept.Unlock()
				return
			}
			kept.Unlock()
			why = "the tests have run"
		}
		if err := k.drop(); err != nil {
			t.Errorf("drop schema %s (not kept: %s): %v", k.schema, why, err)
		}
	})
	return k
}

// keep empties k for the next case when t left it as it found it, and
// returns "", or why it is not kept.
func (k *keptSchema) keep(t testing.TB) string {
	if t.Failed() {
		return "the case failed"
	}
	if n := k.inUse(); n > 0 {
		return fmt.Sprintf("%d connections still in use", n)
	}
	ctx := context.Background()
	admin := testdb.PostgresAdmin(t)
	shape, _, err := schemaShape(ctx, admin, k.schema)
	switch {
	case err != nil:
		return err.Error()
	case shape != k.shape:
		return "the case changed the schema"
	}
	// A lock a connection of the case still holds (a transaction left
	// open) would make TRUNCATE wait: it waits 5 s at most, and the
	// schema is dropped.
	err = pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, k.empty)
		return err
	})
	if err != nil {
		return "emptying it: " + err.Error()
	}
	if k.idle != nil {
		k.idle(k.idleToKeep(t))
	}
	return ""
}

// keepIdle is how many idle connections a kept handle keeps between cases
// at least. A handle of the race cases (Racers+4 connections) keeps more,
// all of them where the server has room (idleBudget): each of the ~50 race
// cases of a configuration opened ~32 connections anew, most of a
// configuration's ~2,000 sessions (measured with log_connections). Kept
// with all of them on a server of max_connections 400, the handles held
// hundreds of idle connections together and PostgreSQL refused new ones
// ("too many clients already").
const keepIdle = 2

// idleBudget is how many idle server connections beyond keepIdle each the
// waiting kept handles of the process hold together: a quarter of the
// server's max_connections (250 of .ci/run's 1000; 25 of the default 100).
func idleBudget(t testing.TB) int {
	return testdb.PostgresMaxConnections(t) / 4
}

// idleToKeep returns how many of its idle connections k keeps while it
// waits for the next case, and takes what it keeps beyond keepIdle from
// the budget. A bouncer's clients cost the server nothing: a bounced
// handle keeps all of them.
func (k *keptSchema) idleToKeep(t testing.TB) int {
	if k.bounced {
		return math.MaxInt
	}
	budget := idleBudget(t)
	kept.Lock()
	defer kept.Unlock()
	k.extra = max(0, min(k.maxIdle-keepIdle, budget-kept.idle))
	kept.idle += k.extra
	return keepIdle + k.extra
}

// pgxIdle is keptSchema.idle for pool.
func pgxIdle(pool *pgxpool.Pool) func(n int) {
	return func(n int) {
		if n < 0 {
			return
		}
		ctx := context.Background()
		for i, c := range pool.AcquireAllIdle(ctx) {
			if i < n {
				c.Release()
				continue
			}
			_ = c.Hijack().Close(ctx)
		}
	}
}

// sqlIdle is keptSchema.idle for db, whose bound of idle connections is
// maxIdle.
func sqlIdle(db *sql.DB, maxIdle int) func(n int) {
	return func(n int) {
		if n < 0 {
			db.SetMaxIdleConns(maxIdle)
		} else {
			db.SetMaxIdleConns(min(n, maxIdle))
		}
	}
}

// schemaShape returns a digest of schema's shape and its tables
// (schema-qualified) but the goose version tables.
func schemaShape(ctx context.Context, admin *pgxpool.Pool, schema string) (shape string, tables []string, err error) {
	err = admin.QueryRow(ctx, `
		SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
			SELECT 'rel ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.reloptions::text, '') || ' ' ||
			       coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
			                 a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum)
			                 FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
			FROM pg_class c WHERE c.relnamespace = $1::text::regnamespace
			UNION ALL
			SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1::text
			UNION ALL
			SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = $1::text::regnamespace
			UNION ALL
			SELECT 'trigger ' || tgname || ' ' || tgrelid::regclass::text FROM pg_trigger
			WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = $1::text::regnamespace)
			UNION ALL
			SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = $1::text::regnamespace
			UNION ALL
			SELECT 'policy ' || policyname FROM pg_policies WHERE schemaname = $1::text
		) s(x)`, schema).Scan(&shape)
	if err != nil {
		return "", nil, fmt.Errorf("shape: %w", err)
	}
	rows, err := admin.Query(ctx, `
		SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables
		WHERE schemaname = $1::text AND tablename NOT LIKE '%goose_db_version' ORDER BY tablename`, schema)
	if err != nil {
		return "", nil, fmt.Errorf("tables: %w", err)
	}
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", nil, fmt.Errorf("tables: %w", err)
	}
	if len(tables) == 0 {
		return "", nil, fmt.Errorf("no tables in schema %s", schema)
	}
	return shape, tables, nil
}
