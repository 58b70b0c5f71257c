package failover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// target is the address the clients' dialer connects to: switched from
// the primary to the replica at the promotion, as a virtual IP or a proxy
// would switch it.
var (
	target     atomic.Pointer[string]
	dialerOnce sync.Once
)

func registerDialer() {
	dialerOnce.Do(func() {
		mysql.RegisterDialContext("failover", func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", *target.Load())
		})
	})
}

func mustExec(t *testing.T, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := db.ExecContext(ctx, q)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// mariaCluster starts a primary and a read-only replica with GTID
// replication, semi-synchronous (AFTER_SYNC, a 10-minute timeout) or
// asynchronous. The schema and users are created on the primary and
// replicate.
func mariaCluster(t *testing.T, semisync bool) (primary, replica *dbserver.Server, rootP, rootR *sql.DB) {
	t.Helper()
	primary, err := dbserver.NewMariaDB("--server-id=1", "--gtid-strict-mode=ON")
	need(t, "throwaway MariaDB", err)
	t.Cleanup(primary.Remove)
	replica, err = dbserver.NewMariaDB("--server-id=2", "--gtid-strict-mode=ON", "--read-only=ON", "--log-slave-updates=ON")
	need(t, "throwaway MariaDB replica", err)
	t.Cleanup(replica.Remove)
	rootP, err = sql.Open("mysql", primary.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rootP.Close() })
	rootR, err = sql.Open("mysql", replica.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rootR.Close() })
	mustExec(t, rootP, "CREATE USER repl@'%' IDENTIFIED BY 'repl'", "GRANT REPLICATION SLAVE ON *.* TO repl@'%'",
		"CREATE DATABASE app", "CREATE USER app@'%' IDENTIFIED BY 'app'", "GRANT ALL ON app.* TO app@'%'")
	mustExec(t, rootR, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", primary.Port),
		"START SLAVE")
	waitFor(t, "the replica receiving the users", func(ctx context.Context) (bool, error) {
		var n int
		err := rootR.QueryRowContext(ctx, "SELECT count(*) FROM mysql.user WHERE user = 'app'").Scan(&n)
		return n == 1, err
	})
	if semisync {
		// Enabled once the replica is there: with no replica a commit
		// would stall for the whole timeout. The IO thread reconnects to
		// register as a semi-synchronous replica.
		mustExec(t, rootR, "SET GLOBAL rpl_semi_sync_slave_enabled = ON", "STOP SLAVE IO_THREAD")
		mustExec(t, rootP, "SET GLOBAL rpl_semi_sync_master_timeout = 600000",
			"SET GLOBAL rpl_semi_sync_master_wait_point = 'AFTER_SYNC'",
			"SET GLOBAL rpl_semi_sync_master_enabled = ON")
		mustExec(t, rootR, "START SLAVE IO_THREAD")
		waitFor(t, "the replica acknowledging semi-synchronously", func(ctx context.Context) (bool, error) {
			var name, v string
			err := rootP.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &v)
			return v == "1", err
		})
	}
	return primary, replica, rootP, rootR
}

// waitApplied waits until the replica has applied everything it received
// (careful promotion: with the IO thread stopped, the SQL thread drains
// the relay log; semi-sync acknowledged what reached the relay log).
func waitApplied(t *testing.T, rootR *sql.DB) {
	t.Helper()
	waitFor(t, "the replica applying its relay log", func(ctx context.Context) (bool, error) {
		rows, err := rootR.QueryContext(ctx, "SHOW SLAVE STATUS")
		if err != nil {
			return false, err
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		if !rows.Next() {
			return false, errors.New("no slave status")
		}
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return false, err
		}
		st := map[string]string{}
		for i, c := range cols {
			st[c] = vals[i].String
		}
		return st["Master_Log_File"] == st["Relay_Master_Log_File"] &&
			st["Read_Master_Log_Pos"] == st["Exec_Master_Log_Pos"] &&
			st["Slave_IO_Running"] == "No", nil
	})
}

// mariaFailoverRun is failoverRun on MariaDB: the clients' dialer sends
// them to the primary; after ackedBefore answers the primary is killed
// with SIGKILL, the replica promoted with care (STOP SLAVE IO_THREAD, the
// relay log applied, STOP SLAVE, RESET SLAVE ALL, read_only=OFF) and the
// dialer switched to it.
func mariaFailoverRun(t *testing.T, semisync bool) failoverCounts {
	primary, replica, rootP, rootR := mariaCluster(t, semisync)
	registerDialer()
	addr := fmt.Sprintf("127.0.0.1:%d", primary.Port)
	target.Store(&addr)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "app", "app", "failover", "switch", "app"
	cfg.ParseTime = true
	cfg.Timeout = 10 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(workers + 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (scope VARBINARY(255) NOT NULL, k VARBINARY(255) NOT NULL, n BIGINT NOT NULL DEFAULT 1)"); err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	call := mysqlCall(ctx, db, store)
	promote := func() {
		mustExec(t, rootR, "STOP SLAVE IO_THREAD")
		waitApplied(t, rootR)
		mustExec(t, rootR, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
		a := fmt.Sprintf("127.0.0.1:%d", replica.Port)
		target.Store(&a)
	}
	kill := func() error {
		if semisync {
			// Semi-sync still on, every commit so far acknowledged by
			// the replica (it turns itself off after a timeout).
			var name, status, noTx string
			if err := rootP.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'").Scan(&name, &status); err != nil {
				return err
			}
			if err := rootP.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_no_tx'").Scan(&name, &noTx); err != nil {
				return err
			}
			if status != "ON" || noTx != "0" {
				return fmt.Errorf("semi-sync before the kill: status %s, %s commits not acknowledged by the replica", status, noTx)
			}
		}
		return primary.Stop(syscall.SIGKILL)
	}
	return runFailover(t, ctx, call, kill, promote, mysqlCount(rootR), mysqlLedgerKeys(rootR, "app.ledger"), "app.")
}

// mysqlCall is runFailover's call on a MariaDB handle: Store.Run for even
// workers, Store.Do in the caller's transaction for odd ones, each with a
// ledger row as its effect.
func mysqlCall(ctx context.Context, db *sql.DB, store *dedupe.Store[*sql.Tx]) func(w int, key string) (sqlonce.Result, error) {
	return func(w int, key string) (sqlonce.Result, error) {
		effect := func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', ?)", key)
			return err
		}
		req := dedupe.Request{Scope: "s", Key: key}
		if w%2 == 0 {
			return store.Run(ctx, req, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				return nil, effect(ctx, tx)
			})
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return sqlonce.Result{}, err
		}
		res, err := store.Do(ctx, tx, req, func(ctx context.Context) error { return effect(ctx, tx) })
		if err != nil {
			tx.Rollback()
			return sqlonce.Result{}, err
		}
		if err := tx.Commit(); err != nil {
			return sqlonce.Result{}, err
		}
		return res, nil
	}
}

// mysqlCount is runFailover's count on a MariaDB handle.
func mysqlCount(db *sql.DB) func(q string) (int, error) {
	return func(q string) (int, error) {
		var n int
		err := db.QueryRowContext(context.Background(), q).Scan(&n)
		return n, err
	}
}

// mysqlLedgerKeys is runFailover's ledgerKeys on a MariaDB handle, the
// ledger table named table.
func mysqlLedgerKeys(db *sql.DB, table string) func() (map[string]bool, error) {
	return func() (map[string]bool, error) {
		rows, err := db.QueryContext(context.Background(), "SELECT k FROM "+table)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		have := map[string]bool{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return nil, err
			}
			have[k] = true
		}
		return have, rows.Err()
	}
}

// TestFailoverMariaDBAsync: GTID replication, asynchronous. Answers the
// replica had not received are lost with the primary: measured.
func TestFailoverMariaDBAsync(t *testing.T) {
	testdb.Long(t)
	c := mariaFailoverRun(t, false)
	t.Logf("async: %d keys answered; lost with the old primary: %d (%d of them resent and run again during the run, %d after it)",
		c.Acked, c.AckedLost+c.RunAgain, c.RunAgain, c.ResendRan)
}

// TestFailoverMariaDBSemiSync: semi-synchronous replication
// (rpl_semi_sync_master_wait_point=AFTER_SYNC, a 10-minute timeout) and a
// careful promotion: no answer is lost.
func TestFailoverMariaDBSemiSync(t *testing.T) {
	testdb.Long(t)
	c := mariaFailoverRun(t, true)
	if c.AckedLost != 0 || c.RunAgain != 0 {
		t.Errorf("semi-synchronous replication: %d keys answered on the old primary were lost, %d run again on the new one", c.AckedLost, c.RunAgain)
	}
}
