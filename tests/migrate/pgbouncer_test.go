package migrate_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgbouncer.Stop()
	os.Exit(code)
}

// Instances starting at once run migrations.Up through a PgBouncer in
// transaction pooling mode: each succeeds, the schema is migrated once, and
// no advisory lock is left on any server connection. goose's session lock
// would be released by a statement that the bouncer may send to another
// server connection than the one holding it.
func TestUpThroughPgBouncer(t *testing.T) {
	ctx := context.Background()
	b := pgbouncer.Shared(t)
	schema, _ := testdb.EmptyPostgres(t)
	// application_name follows a client to its server connection through
	// PgBouncer: it tells this test's server connections from those of
	// tests running beside it (whose migrations take the same lock).
	app := "sqlonce-migrate-" + schema
	dsn := b.Schema(t, schema, nil) + "&default_query_exec_mode=exec&application_name=" + app
	const instances = 4
	var wg sync.WaitGroup
	errs := make([]error, instances)
	for i := range instances {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(3)
		t.Cleanup(func() { db.Close() })
		wg.Go(func() { errs[i] = migrations.Up(ctx, db, migrations.Postgres) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	direct, err := sql.Open("pgx", testdb.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var applied int
	if err := direct.QueryRowContext(ctx, "SELECT count(*) FROM "+schema+"."+migrations.TableName+" WHERE version_id > 0").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != latest {
		t.Errorf("%d migrations recorded, want %d", applied, latest)
	}
	// The lock's key is the schema's (migrations' schemaLockKey): classid
	// holds its high 32 bits, objid the low ones. A stranded lock is held
	// by a server connection
	// outside any transaction (idle); only this test's server connections
	// are counted: tests running beside it take the same lock.
	var held int
	if err := direct.QueryRowContext(ctx, `
		SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
		CROSS JOIN (SELECT hashtextextended($1, $2) AS key) AS k
		WHERE l.locktype = 'advisory' AND l.granted AND a.state = 'idle' AND a.application_name = $3
		  AND l.classid::bigint = (k.key >> 32) & 4294967295 AND l.objid::bigint = k.key & 4294967295`,
		schema, int64(0x73716c6f6e6365), app).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d advisory locks of the migrations left held", held)
	}
}
