package failover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// readOnlyCase is one driver pointed at a server that takes no writes.
type readOnlyCase[TTx any] struct {
	d      sqlonce.Driver[TTx]
	begin  func(ctx context.Context) (TTx, func(), error) // a transaction and its rollback
	exec   func(ctx context.Context, tx TTx, q string, args ...any) error
	insert string // the ledger insert, scope and key as arguments
}

// checkReadOnly runs every kind of sqlonce call that writes against a
// server that refuses writes, and checks that each answers ErrReadOnly
// naming the fix, and that a key the server's copy holds (done) is
// answered AlreadyDone. It returns how many times Run's fn ran.
func checkReadOnly[TTx any](t *testing.T, c readOnlyCase[TTx], done string) (fnRuns int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := dedupe.New(c.d)
	if err != nil {
		t.Fatal(err)
	}
	isReadOnly := func(what string, err error) {
		t.Helper()
		switch {
		case !errors.Is(err, sqlonce.ErrReadOnly):
			t.Errorf("%s: got %v, want an error matching sqlonce.ErrReadOnly", what, err)
		case sqlonce.IsRetryable(err):
			t.Errorf("%s: IsRetryable(%v) = true", what, err)
		case sqlonce.ErrorType(err) != "read_only":
			t.Errorf("%s: ErrorType = %q", what, sqlonce.ErrorType(err))
		case !strings.Contains(err.Error(), "route sqlonce") || !strings.Contains(err.Error(), "primary"):
			t.Errorf("%s: the message does not name the fix: %v", what, err)
		}
	}

	// Run of a key the server has never seen: its read finds nothing,
	// fn runs in the transaction, and the write is refused.
	res, err := store.Run(ctx, dedupe.Request{Scope: "s", Key: "new"}, func(ctx context.Context, tx TTx) ([]byte, error) {
		fnRuns++
		return nil, c.exec(ctx, tx, c.insert, "s", "new")
	})
	isReadOnly("Run of a new key", err)
	if res.Outcome != 0 {
		t.Errorf("Run of a new key: outcome %v with %v", res.Outcome, err)
	}
	t.Logf("Run of a new key: fn ran %d time(s), refused with: %v", fnRuns, err)

	// A key the copy holds is answered from it.
	res, err = store.Run(ctx, dedupe.Request{Scope: "s", Key: done}, func(ctx context.Context, tx TTx) ([]byte, error) {
		t.Errorf("Run of a key done on the primary: fn ran")
		return nil, nil
	})
	if err != nil || res.Outcome != sqlonce.AlreadyDone {
		t.Errorf("Run of a key done on the primary: %v, %v; want AlreadyDone", res.Outcome, err)
	}

	// Do in the caller's transaction claims first: fn never runs.
	tx, rollback, err := c.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Do(ctx, tx, dedupe.Request{Scope: "s", Key: "new-do"}, func(ctx context.Context) error {
		t.Errorf("Do on a read-only server: fn ran")
		return nil
	})
	rollback()
	isReadOnly("Do", err)

	_, _, err = store.Claim(ctx, dedupe.Request{Scope: "s", Key: "new-lease"}, time.Minute)
	isReadOnly("lease Claim", err)

	// An operation of several steps: its start is refused; a key the
	// primary left stuck is listed from the copy, and its resume refused.
	_, err = store.RunSteps(ctx, dedupe.Request{Scope: "s", Key: "new-steps"}, nil, stuckOp[TTx]())
	isReadOnly("RunSteps", err)
	finished, failed, err := store.ResumeStuck(ctx, 3, stuckOp[TTx]())
	isReadOnly("ResumeStuck", err)
	if finished != 0 || failed != 0 {
		t.Errorf("ResumeStuck: %d finished, %d given up on a read-only server", finished, failed)
	}

	tokens, err := token.New(c.d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Issue(ctx, "s")
	isReadOnly("token Issue", err)
	return fnRuns
}

// errStuck stops stuckOp's only step.
var errStuck = errors.New("the step fails")

// stuckOp is an operation of several steps whose step fails: a run of it
// leaves its key stuck, for ResumeStuck to find.
func stuckOp[TTx any]() *dedupe.Operation[TTx] {
	return &dedupe.Operation[TTx]{Name: "stuck", Steps: []dedupe.Step[TTx]{{Name: "fail",
		Outside: func(context.Context, dedupe.StepState) ([]byte, error) { return nil, errStuck }}}}
}

// leaveStuck runs stuckOp on the primary under key "stuck".
func leaveStuck[TTx any](t *testing.T, s *dedupe.Store[TTx]) {
	t.Helper()
	if _, err := s.RunSteps(context.Background(), dedupe.Request{Scope: "s", Key: "stuck"}, nil, stuckOp[TTx]()); !errors.Is(err, errStuck) {
		t.Fatalf("RunSteps on the primary: %v, want the step's error", err)
	}
}

// TestReadOnlyPostgres points pgxdriver and pgsqldriver at a hot standby
// (pg_is_in_recovery(); every write fails with 25006).
func TestReadOnlyPostgres(t *testing.T) {
	testdb.Long(t)
	primary, standby := pgCluster(t, false)
	migrate(t, primary.DSN)
	ctx := context.Background()

	onPrimary, err := dedupe.New(testdrv.Pgx(t, pgPool(t, primary.DSN, 4)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onPrimary.Run(ctx, dedupe.Request{Scope: "s", Key: "done"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ($1, $2)", "s", "done")
		return []byte("ok"), err
	}); err != nil {
		t.Fatal(err)
	}
	leaveStuck(t, onPrimary)
	waitReplayed(t, primary, standby)
	var inRecovery bool
	if err := queryRow(ctx, standby.DSN, "SELECT pg_is_in_recovery()", &inRecovery); err != nil || !inRecovery {
		t.Fatalf("standby: pg_is_in_recovery() = %v, %v", inRecovery, err)
	}

	pool := pgPool(t, standby.DSN, 4)
	t.Run("pgxdriver", func(t *testing.T) {
		checkReadOnly(t, readOnlyCase[pgx.Tx]{
			d: testdrv.Pgx(t, pool),
			begin: func(ctx context.Context) (pgx.Tx, func(), error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return nil, nil, err
				}
				return tx, func() { tx.Rollback(context.Background()) }, nil
			},
			exec: func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
				_, err := tx.Exec(ctx, q, args...)
				return err
			},
			insert: "INSERT INTO ledger (scope, k) VALUES ($1, $2)",
		}, "done")
	})
	t.Run("pgsqldriver", func(t *testing.T) {
		db := pgSQL(t, pool)
		checkReadOnly(t, sqlCase(testdrv.PgSQL(t, db), db, "INSERT INTO ledger (scope, k) VALUES ($1, $2)"), "done")
	})
	var n int
	if err := queryRow(ctx, primary.DSN, "SELECT count(*) FROM ledger WHERE k <> 'done'", &n); err != nil || n != 0 {
		t.Errorf("ledger rows on the primary besides the one done there: %d, %v", n, err)
	}
	t.Run("httpidem and grpcidem", func(t *testing.T) { checkIdemReadOnly(t, pool, pgPool(t, primary.DSN, 4)) })
}

func sqlCase(d sqlonce.Driver[*sql.Tx], db *sql.DB, insert string) readOnlyCase[*sql.Tx] {
	return readOnlyCase[*sql.Tx]{
		d: d,
		begin: func(ctx context.Context) (*sql.Tx, func(), error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return tx, func() { tx.Rollback() }, nil
		},
		exec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
		insert: insert,
	}
}

// TestReadOnlyMariaDB points mysqldriver at a MariaDB replica (GTID
// replication, read_only=ON as replicas run): every write of a user
// without the READ ONLY ADMIN privilege fails with 1290 (root has it and
// writes anyway).
func TestReadOnlyMariaDB(t *testing.T) {
	testdb.Long(t)
	primary, replica, rootP, rootR := mariaCluster(t, false)
	ctx := context.Background()
	appDB := func(srv *dbserver.Server) *sql.DB {
		cfg := mysqldrv.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = "app", "app", "tcp", fmt.Sprintf("127.0.0.1:%d", srv.Port), "app"
		cfg.ParseTime = true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	db := appDB(primary)
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (scope varchar(255) NOT NULL, k varchar(255) NOT NULL, n bigint NOT NULL DEFAULT 1)"); err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Run(ctx, dedupe.Request{Scope: "s", Key: "done"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (scope, k) VALUES (?, ?)", "s", "done")
		return []byte("ok"), err
	}); err != nil {
		t.Fatal(err)
	}
	leaveStuck(t, store)
	waitFor(t, "the replica applying the keys written on the primary", func(ctx context.Context) (bool, error) {
		var n int
		err := rootR.QueryRowContext(ctx, "SELECT count(*) FROM app.sqlonce_keys").Scan(&n)
		return n == 2, err
	})
	ro := appDB(replica)
	checkReadOnly(t, sqlCase(testdrv.MySQL(t, ro), ro, "INSERT INTO ledger (scope, k) VALUES (?, ?)"), "done")
	var n int
	if err := rootP.QueryRowContext(ctx, "SELECT count(*) FROM app.ledger WHERE k <> 'done'").Scan(&n); err != nil || n != 0 {
		t.Errorf("ledger rows on the primary besides the one done there: %d, %v", n, err)
	}
	t.Run("httpidem", func(t *testing.T) {
		checkIdemReadOnlySQL(t, testdrv.MySQL(t, ro), testdrv.MySQL(t, db), "INSERT INTO ledger (scope, k) VALUES ('s', ?)", "http-sql")
		var n int
		if err := rootP.QueryRowContext(ctx, "SELECT count(*) FROM app.ledger WHERE k = 'http-sql'").Scan(&n); err != nil || n != 1 {
			t.Errorf("ledger rows for http-sql on the primary: %d, %v; want 1", n, err)
		}
	})
}
