package galera

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// abortHolder has another node (writers[0]) add to order x and commit.
// Applied on node a, that write set aborts the transaction on a that
// holds x (Galera's brute-force abort): its next statement fails with
// 1213, and MariaDB has rolled it back. abortHolder returns once a has
// applied it: a read on a with wsrep_sync_wait waits for that.
//
// The write has been seen to wait out innodb_lock_wait_timeout (1205
// after 50 s) now and then, on a lock of the writing node that no test
// session held, and again on the same node when retried there. Each try
// is bounded at 10 s, and a timed-out one is tried again on the next of
// writers (any node but a does the job), as a Galera client retries 1205.
func abortHolder(ctx context.Context, a harness.DB[*sql.Tx], x int64, writers ...harness.DB[*sql.Tx]) error {
	var err error
	for try := 0; try < 2*len(writers); try++ {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = writers[try%len(writers)].Pool().OrderAddAmount(tctx, x, 1, 5)
		cancel()
		var me *mysql.MySQLError
		timedOut := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &me) && me.Number == 1205
		if err == nil || !timedOut || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	_, err = a.Pool().OrderGetByID(ctx, x)
	return err
}

// TestCluster shows the harness does what the other tests rely on: a row
// committed on one node is read on the others (wsrep_sync_wait=1), and a
// node killed with SIGKILL rejoins and catches up on what it missed.
func TestCluster(t *testing.T) {
	c := galera.Shared(t)
	ctx := context.Background()
	open := func(i int) *sql.DB {
		db, err := sql.Open("mysql", c.DSN(i, "", galera.Params...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	dbs := []*sql.DB{open(1), open(2), open(3)}
	// A write set that conflicts with another node's (here, with the
	// CREATE TABLE still being applied) fails with a deadlock error:
	// retried, as a client of Galera must.
	exec := func(db *sql.DB, q string, args ...any) {
		t.Helper()
		var err error
		for range 10 {
			if _, err = db.ExecContext(ctx, q, args...); err == nil || !isDeadlock(err) {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func(db *sql.DB) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM galera_harness.t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec(dbs[0], "CREATE DATABASE galera_harness")
	t.Cleanup(func() { _, _ = dbs[0].ExecContext(ctx, "DROP DATABASE galera_harness") })
	exec(dbs[0], "CREATE TABLE galera_harness.t (id BIGINT PRIMARY KEY)")
	for i, db := range dbs {
		exec(db, "INSERT INTO galera_harness.t VALUES (?)", i+1)
	}
	for i, db := range dbs {
		if n := count(db); n != 3 {
			t.Errorf("node %d sees %d rows, want 3", i+1, n)
		}
	}

	began := time.Now()
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	exec(dbs[0], "INSERT INTO galera_harness.t VALUES (4)")
	exec(dbs[2], "INSERT INTO galera_harness.t VALUES (5)")
	if err := c.Restart(2); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 2 killed and rejoined in %v", time.Since(began).Round(time.Millisecond))
	if n := count(dbs[1]); n != 5 {
		t.Errorf("node 2 sees %d rows after rejoining, want 5", n)
	}
}
