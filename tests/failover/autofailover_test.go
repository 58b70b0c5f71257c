package failover

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/autofailover"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestPgAutoFailover: a pg_auto_failover formation (a monitor, a primary
// and a secondary, synchronous replication as pg_auto_failover sets it up,
// its timeouts shortened by autofailover.Fast), under load from clients
// that follow the primary with a multi-host DSN
// (target_session_attrs=read-write): pgx through a pgxpool, and
// database/sql through pgx's stdlib driver, which takes the same DSN. The
// primary's node is killed with SIGKILL (pg_autoctl and PostgreSQL at
// once); the monitor promotes the secondary by itself, and the clients
// reconnect to it. On the new primary: no key with two effects, none
// without its effect, no effect without its key, and no answered key lost.
func TestPgAutoFailover(t *testing.T) {
	testdb.Long(t)
	f, err := autofailover.Start(2)
	need(t, "pg_auto_failover formation (postgresql-15-auto-failover, pg-auto-failover-cli)", err)
	t.Cleanup(f.Stop)
	t.Logf("pg_auto_failover: monitor and 2 nodes ready in %v", f.Started.Round(100*time.Millisecond))
	primary, secondary := f.Nodes[0], f.Nodes[1]
	var syncNames string
	if err := queryRow(context.Background(), primary.DSN(), "SHOW synchronous_standby_names", &syncNames); err != nil {
		t.Fatal(err)
	}
	if syncNames == "" {
		t.Fatal("the primary has no synchronous standby: the run would not test synchronous replication")
	}
	t.Logf("primary: synchronous_standby_names = %s", syncNames)
	migrate(t, primary.DSN())

	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write connect_timeout=10",
		primary.Port, secondary.Port)
	pool := pgPool(t, dsn, workers+2)
	store, err := dedupe.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sqlStore, err := dedupe.New(testdrv.PgSQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const insert = "INSERT INTO ledger (scope, k) VALUES ('s', $1)"
	// call sends one key once: Store.Run on pgx for a third of the
	// workers, Store.Do in the caller's pgx transaction for another, and
	// Store.Run on database/sql for the last.
	call := func(w int, key string) (sqlonce.Result, error) {
		req := dedupe.Request{Scope: "s", Key: key}
		switch w % 3 {
		case 0:
			return store.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, insert, key)
				return nil, err
			})
		case 1:
			var res sqlonce.Result
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				res, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
					_, err := tx.Exec(ctx, insert, key)
					return err
				})
				return err
			})
			if err != nil {
				return sqlonce.Result{}, err
			}
			return res, nil
		default:
			return sqlStore.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, insert, key)
				return nil, err
			})
		}
	}
	c := runFailover(t, ctx, call, func() error { return f.Kill(1) }, func() {
		// pg_auto_failover promotes the secondary; it takes writes once
		// it reports wait_primary (no secondary left to wait for).
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := f.WaitState(wctx, secondary.Name, "wait_primary"); err != nil {
			t.Error(err)
		}
	}, pgCount(secondary.DSN()), pgLedgerKeys(secondary.DSN()), "")
	if c.AckedLost != 0 || c.RunAgain != 0 {
		t.Errorf("synchronous replication under pg_auto_failover: %d keys answered on the old primary were lost, %d run again on the new one", c.AckedLost, c.RunAgain)
	}
	t.Logf("pg_auto_failover: %d keys answered, none lost; clients back %v after the kill", c.Acked, c.Downtime.Round(time.Millisecond))
}
