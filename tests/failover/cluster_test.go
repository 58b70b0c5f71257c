package failover

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// need skips t (fails it under CI=true) when a server could not start.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if testdb.InCI() {
		t.Fatalf("CI=true and no %s: %v", what, err)
	}
	t.Skipf("no %s (run as root with postgresql-15 and mariadb-server installed): %v", what, err)
}

// pgCluster starts a primary and a hot standby streaming from it, named
// s1. With sync, the primary waits for s1 at every commit
// (synchronous_standby_names=s1, synchronous_commit=on).
func pgCluster(t *testing.T, sync bool) (primary, standby *dbserver.Server) {
	t.Helper()
	var settings []string
	if sync {
		settings = append(settings, "synchronous_standby_names=s1", "synchronous_commit=on")
	}
	primary, err := dbserver.NewPostgres(settings...)
	need(t, "throwaway PostgreSQL", err)
	t.Cleanup(primary.Remove)
	standby, err = dbserver.NewStandby(primary, "s1")
	need(t, "PostgreSQL standby (pg_basebackup)", err)
	t.Cleanup(standby.Remove)
	// The standby answers once it is consistent; wait until it streams.
	waitFor(t, "the standby streaming from the primary", func(ctx context.Context) (bool, error) {
		var n int
		err := queryRow(ctx, primary.DSN, "SELECT count(*) FROM pg_stat_replication WHERE application_name = 's1' AND state = 'streaming'", &n)
		return n == 1, err
	})
	return primary, standby
}

// migrate creates sqlonce's tables and the ledger on a PostgreSQL server.
func migrate(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (scope text NOT NULL, k text NOT NULL, n bigint NOT NULL DEFAULT 1)"); err != nil {
		t.Fatal(err)
	}
}

// waitReplayed waits until standby has replayed everything primary has
// written so far.
func waitReplayed(t *testing.T, primary, standby *dbserver.Server) {
	t.Helper()
	var lsn string
	if err := queryRow(context.Background(), primary.DSN, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby replaying "+lsn, func(ctx context.Context) (bool, error) {
		var ok bool
		err := queryRow(ctx, standby.DSN, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", &ok, lsn)
		return ok, err
	})
}

func queryRow(ctx context.Context, dsn, q string, dest any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, q, args...).Scan(dest)
}

// waitFor polls cond until it holds, for up to two minutes: the machine
// may be loaded by other test packages.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ok, err := cond(context.Background())
		if ok && err == nil {
			return
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("waited 2m for %s; last error: %v", what, last)
}

func pgPool(t *testing.T, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func pgSQL(t *testing.T, pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return db
}
