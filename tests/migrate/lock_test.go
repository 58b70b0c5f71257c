package migrate_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// The migrations' advisory lock is per schema: Up in one schema, stuck
// while it holds the lock, does not hold up Up in another schema of the
// same database (advisory locks belong to the database). Both handle
// shapes are checked: several connections (the lock in a transaction of
// its own) and one connection (goose's session lock).
func TestUpLockIsPerSchema(t *testing.T) {
	for _, conns := range []int{4, 1} {
		t.Run(map[int]string{4: "TxLock", 1: "SessionLock"}[conns], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			schemaA, dsnA := testdb.EmptyPostgres(t)
			_, dsnB := testdb.EmptyPostgres(t)
			open := func(dsn string) *sql.DB {
				db, err := sql.Open("pgx", dsn)
				if err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(conns)
				t.Cleanup(func() { db.Close() })
				return db
			}
			// application_name tells Up's sessions in schema A from those of
			// tests running beside this one.
			app := "sqlonce-lock-" + schemaA
			dbA, dbB := open(dsnA+"&application_name="+app), open(dsnB)

			// Up in schema A takes its lock, then its first migration's
			// CREATE TABLE sqlonce_keys waits for another transaction that
			// created a table of that name in schema A and has not ended.
			blocker, err := sql.Open("pgx", dsnA)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close()
			hold, err := blocker.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback()
			if _, err := hold.ExecContext(ctx, "CREATE TABLE "+schemaA+".sqlonce_keys (held int)"); err != nil {
				t.Fatal(err)
			}
			upA := make(chan error, 1)
			go func() { upA <- migrations.Up(ctx, dbA, migrations.Postgres) }()
			waitLockWait(t, ctx, blocker, app)

			// Schema B's Up finishes while A's holds A's lock.
			ctxB, cancelB := context.WithTimeout(ctx, 30*time.Second)
			defer cancelB()
			if err := migrations.Up(ctxB, dbB, migrations.Postgres); err != nil {
				t.Fatalf("Up in schema B while Up in schema A held its lock: %v", err)
			}
			var applied int
			if err := dbB.QueryRowContext(ctx, "SELECT count(*) FROM "+migrations.TableName+" WHERE version_id > 0").Scan(&applied); err != nil {
				t.Fatal(err)
			}
			if applied != latest {
				t.Fatalf("schema B: %d migrations recorded, want %d", applied, latest)
			}
			if err := hold.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := <-upA; err != nil {
				t.Fatalf("Up in schema A after its table was released: %v", err)
			}
		})
	}
}

// waitLockWait returns once a session named app waits for a lock.
func waitLockWait(t *testing.T, ctx context.Context, db *sql.DB, app string) {
	t.Helper()
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("Up in schema A never waited for the table")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
