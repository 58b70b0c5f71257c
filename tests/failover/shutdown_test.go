package failover

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestTerminatedAtCommit ends a session (pg_terminate_backend: 57P01
// admin_shutdown, as a primary shutting down for a failover sends) while
// its COMMIT waits for a synchronous standby that never answers.
// PostgreSQL has committed locally by then ("canceling the wait for
// synchronous replication and terminating connection due to administrator
// command ... already committed locally"): Store.Run must answer
// ErrCommitUnknown, not a plain failure, and the resend with the same key
// AlreadyDone. (The clients saw the connection end: pgx "unexpected EOF",
// pgx's stdlib "conn closed".)
func TestTerminatedAtCommit(t *testing.T) {
	srv, err := dbserver.NewPostgres()
	need(t, "throwaway PostgreSQL", err)
	t.Cleanup(srv.Remove)
	migrate(t, srv.DSN)
	// From now on every commit that writes waits for a standby named
	// nobody.
	c, err := pgx.Connect(context.Background(), srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(context.Background(), "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(context.Background(), "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	c.Close(context.Background())
	waitFor(t, "the configuration reloaded", func(ctx context.Context) (bool, error) {
		var v string
		err := queryRow(ctx, srv.DSN, "SHOW synchronous_standby_names", &v)
		return v == "nobody", err
	})
	pool := pgPool(t, srv.DSN, 4)
	db := pgSQL(t, pool)

	run := func(t *testing.T, key string, runOnce func(ctx context.Context, key string) (sqlonce.Result, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			_, err := runOnce(ctx, key)
			got <- err
		}()
		// The COMMIT waits for the standby named "nobody"; end its session.
		waitFor(t, "a COMMIT waiting for synchronous replication", func(ctx context.Context) (bool, error) {
			var n int
			err := queryRow(ctx, srv.DSN, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", &n)
			return n > 0, err
		})
		err := <-got
		if !errors.Is(err, sqlonce.ErrCommitUnknown) {
			t.Fatalf("Run whose session was terminated at COMMIT: %v; want ErrCommitUnknown", err)
		}
		if sqlonce.IsRetryable(err) {
			t.Errorf("IsRetryable(%v) = true", err)
		}
		t.Logf("COMMIT ended by pg_terminate_backend: %v", err)
		// The resend reads the key the first COMMIT left (it commits
		// nothing, so it does not wait).
		res, err := runOnce(ctx, key)
		if err != nil || res.Outcome != sqlonce.AlreadyDone {
			t.Errorf("resend with the same key: %v, %v; want AlreadyDone", res.Outcome, err)
		}
		var n int
		if err := queryRow(ctx, srv.DSN, "SELECT count(*) FROM ledger WHERE k = $1", &n, key); err != nil || n != 1 {
			t.Errorf("ledger rows for %s: %d, %v; want 1", key, n, err)
		}
	}

	t.Run("pgxdriver", func(t *testing.T) {
		store, err := dedupe.New(testdrv.Pgx(t, pool))
		if err != nil {
			t.Fatal(err)
		}
		run(t, "pgx", func(ctx context.Context, key string) (sqlonce.Result, error) {
			return store.Run(ctx, dedupe.Request{Scope: "s", Key: key}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key)
				return nil, err
			})
		})
	})
	t.Run("pgsqldriver", func(t *testing.T) {
		store, err := dedupe.New(testdrv.PgSQL(t, db))
		if err != nil {
			t.Fatal(err)
		}
		run(t, "pgsql", func(ctx context.Context, key string) (sqlonce.Result, error) {
			return store.Run(ctx, dedupe.Request{Scope: "s", Key: key}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key)
				return nil, err
			})
		})
	})
}

// TestAdminShutdownInTx ends an idle session in a transaction with
// pg_terminate_backend: the next statement, sqlonce's claim, reads the
// server's FATAL 57P01. It is a lost connection (ErrorType "conn_lost"),
// not a commit of unknown outcome: nothing was committed, and the resend
// with the same key is safe.
func TestAdminShutdownInTx(t *testing.T) {
	srv, err := dbserver.NewPostgres()
	need(t, "throwaway PostgreSQL", err)
	t.Cleanup(srv.Remove)
	migrate(t, srv.DSN)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgPool(t, srv.DSN, 2)
	store, err := dedupe.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := queryRow(ctx, srv.DSN, "SELECT pg_terminate_backend($1, 60000)", &ok, pid); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v, %v", ok, err)
	}
	_, err = store.Do(ctx, tx, dedupe.Request{Scope: "s", Key: "k"}, func(ctx context.Context) error {
		t.Error("fn ran on a terminated session")
		return nil
	})
	t.Logf("Do on a terminated session: %v", err)
	if got := sqlonce.ErrorType(err); got != "conn_lost" {
		t.Errorf("ErrorType(%v) = %q, want conn_lost", err, got)
	}
	if errors.Is(err, sqlonce.ErrCommitUnknown) {
		t.Errorf("%v matches ErrCommitUnknown: nothing was being committed", err)
	}
}
