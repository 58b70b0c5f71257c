package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// TestPrepareLosesAbort measures what makes mysqldriver refuse a Galera
// DSN without interpolateParams=true. Node B keeps updating a row; node A
// runs transactions that update the same row, so that B's write sets abort
// them (brute force), then send one slow statement, then an INSERT, then
// roll back. The slow statement is a prepare (COM_STMT_PREPARE), or the
// same text as a query with its argument written in by go-sql-driver/mysql
// (interpolateParams=true). An abort that lands in a query fails that
// query with 1213. One that lands in a prepare is lost: the prepare
// succeeds, MariaDB has rolled the transaction back, and the INSERT after
// it commits on its own, ROLLBACK or not.
//
// The text path must leave no INSERT behind. The prepare path's count is
// reported, not asserted: it is the server's behaviour, and the reason
// sqlonce never prepares on a Galera node (MariaDB 10.11 with Galera 4
// here, three runs: of the INSERTs that followed a successful prepare,
// 18 of 18, 26 of 29 and 49 of 49 committed).
func TestPrepareLosesAbort(t *testing.T) {
	c := galera.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(i int, params ...string) *sql.DB {
		db, err := sql.Open("mysql", c.DSN(i, "", params...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	text, prepares, b := open(1, galera.Params...), open(1, "wsrep_sync_wait=1"), open(2, galera.Params...)
	for _, q := range []string{
		"DROP DATABASE IF EXISTS galera_prepare", "CREATE DATABASE galera_prepare",
		"CREATE TABLE galera_prepare.hot (id BIGINT PRIMARY KEY, v BIGINT)", "INSERT INTO galera_prepare.hot VALUES (1, 0)",
		"CREATE TABLE galera_prepare.leaked (i BIGINT PRIMARY KEY, path VARCHAR(8))",
	} {
		if _, err := text.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = text.ExecContext(context.Background(), "DROP DATABASE galera_prepare") })
	// A statement whose parsing takes milliseconds, so that B's write
	// sets often land in it.
	var list strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&list, ",%d", i)
	}
	slow := "SELECT ? IN (" + list.String()[1:] + ")"

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = b.ExecContext(ctx, "UPDATE galera_prepare.hot SET v = v + 1 WHERE id = 1")
		}
	})
	defer func() { close(stop); wg.Wait() }()

	run := func(path string, db *sql.DB, base int) (aborted, inserted, leaked int) {
		for i := range 300 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE galera_prepare.hot SET v = v + 1 WHERE id = 1"); err != nil {
				_ = tx.Rollback()
				continue
			}
			q := fmt.Sprintf("%s /* %d */", slow, base+i) // a text of its own: prepared anew
			if path == "prepare" {
				_, err = tx.PrepareContext(ctx, q)
			} else {
				var in bool
				err = tx.QueryRowContext(ctx, q, 1).Scan(&in)
			}
			if err != nil {
				if !isDeadlock(err) {
					t.Fatalf("%s: %v", path, err)
				}
				aborted++
				_ = tx.Rollback()
				continue
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO galera_prepare.leaked VALUES (?, ?)", base+i, path); err == nil {
				inserted++
			}
			_ = tx.Rollback()
		}
		if err := text.QueryRowContext(ctx, "SELECT count(*) FROM galera_prepare.leaked WHERE path = ?", path).Scan(&leaked); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: of 300 transactions, %d aborted in the statement (1213), %d inserted then rolled back; %d of those INSERTs committed",
			path, aborted, inserted, leaked)
		return aborted, inserted, leaked
	}
	aborted, _, leaked := run("text", text, 0)
	if aborted == 0 {
		t.Fatal("no transaction was aborted in the slow query: the test did not exercise the abort")
	}
	if leaked > 0 {
		t.Errorf("%d INSERTs of rolled-back transactions committed on the text path, want 0", leaked)
	}
	run("prepare", prepares, 100000)
}

// TestPreparesRefused: on a Galera node whose DSN leaves
// interpolateParams off, so that go-sql-driver/mysql prepares every
// statement with arguments, the MySQL driver refuses every call with
// ErrInvalidArgument naming the parameter: a transaction aborted while it
// prepares one would commit the statements after it one by one
// (TestPrepareLosesAbort). Each kind of first call in a transaction of
// the caller's is refused, on a handle of its own (the check is made once
// per handle): DoBatch, PurgeTx and token's PurgeTx skipped it before.
// The same DSN with the parameter answers.
func TestPreparesRefused(t *testing.T) {
	c := galera.Shared(t)
	ctx := context.Background()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", "wsrep_sync_wait=1")...)
	type stores struct {
		dedupe *dedupe.Store[*sql.Tx]
		tokens *token.Store[*sql.Tx]
	}
	calls := map[string]func(ctx context.Context, s stores, tx *sql.Tx) error{
		"DoBatch": func(ctx context.Context, s stores, tx *sql.Tx) error {
			_, err := s.dedupe.DoBatch(ctx, tx, "s", []string{"a", "b"}, func(context.Context, []string) error { return nil })
			return err
		},
		"Do": func(ctx context.Context, s stores, tx *sql.Tx) error {
			_, err := s.dedupe.Do(ctx, tx, dedupe.Request{Scope: "s", Key: "k"}, func(context.Context) error { return nil })
			return err
		},
		"PurgeTx": func(ctx context.Context, s stores, tx *sql.Tx) error {
			_, err := s.dedupe.PurgeTx(ctx, tx, 10)
			return err
		},
		"token.PurgeTx": func(ctx context.Context, s stores, tx *sql.Tx) error {
			_, err := s.tokens.PurgeTx(ctx, tx, 10)
			return err
		},
	}
	for i, db := range dbs {
		for name, call := range calls {
			h, err := sql.Open("mysql", db.DSN())
			if err != nil {
				t.Fatal(err)
			}
			d := testdrv.MySQL(t, h)
			store, err := dedupe.New(d)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := token.New(d)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = call(ctx, stores{store, tokens}, tx)
			_ = tx.Rollback()
			h.Close()
			if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "interpolateParams=true") {
				t.Fatalf("node %d: %s as the first call without interpolateParams: %v, want ErrInvalidArgument naming interpolateParams=true", i+1, name, err)
			}
		}
		if err := issueOn(t, db.DSN()); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("node %d: Issue without interpolateParams: %v, want ErrInvalidArgument", i+1, err)
		}
	}
	if n, err := dbs[0].KeyCount(ctx); err != nil || n != 0 {
		t.Fatalf("%d keys (%v) after refused calls, want 0", n, err)
	}
	if err := issueOn(t, dbs[0].DSN()+"&interpolateParams=true"); err != nil {
		t.Fatalf("Issue with interpolateParams=true: %v", err)
	}
}

// TestNothingPrepared: on a Galera node mysqldriver prepares none of its
// statements, in a transaction or out of one: the node's count of prepares
// stays where it was through every kind of call. Elsewhere the driver
// prepares each statement once per connection (one round trip a
// statement without interpolateParams); here a prepare in a transaction
// may lose the transaction's abort (TestPrepareLosesAbort).
func TestNothingPrepared(t *testing.T) {
	c := galera.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)[0]
	prepares := func() int64 {
		t.Helper()
		var name string
		var n int64
		if err := sqlDB(db).QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	store, err := dedupe.New(db.Driver())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(db.Driver())
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := unique.New(db.Driver())
	if err != nil {
		t.Fatal(err)
	}
	before := prepares()
	for round := range 2 { // the second round on connections that ran the first
		k := fmt.Sprintf("k%d", round)
		err := harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
			if _, err := store.Do(ctx, tx, dedupe.Request{Scope: "do", Key: k}, func(ctx context.Context) error {
				return db.Tx(tx).LedgerInsert(ctx, "do:"+k, 1)
			}); err != nil {
				return err
			}
			if _, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "resp", Key: k, Fingerprint: []byte("f")}, func(context.Context) ([]byte, error) {
				return []byte("r"), nil
			}); err != nil {
				return err
			}
			if _, err := store.DoBatch(ctx, tx, "batch", []string{k, k + "b"}, func(context.Context, []string) error { return nil }); err != nil {
				return err
			}
			if _, err := inserter.Insert(ctx, tx, "PRIMARY", func(ctx context.Context) error {
				return db.Tx(tx).LedgerInsert(ctx, "u:"+k, 1)
			}); err != nil {
				return err
			}
			tok, err := tokens.IssueTx(ctx, tx, "t")
			if err != nil {
				return err
			}
			_, err = tokens.Consume(ctx, tx, "t", tok)
			return err
		})
		if err != nil {
			t.Fatalf("round %d in a transaction: %v", round, err)
		}
		if _, err := store.Run(ctx, dedupe.Request{Scope: "run", Key: k}, func(context.Context, *sql.Tx) ([]byte, error) { return []byte("r"), nil }); err != nil {
			t.Fatalf("round %d: Run: %v", round, err)
		}
		if _, err := store.RunBatch(ctx, "runbatch", []string{k}, func(context.Context, *sql.Tx, []string) error { return nil }); err != nil {
			t.Fatalf("round %d: RunBatch: %v", round, err)
		}
		l, _, err := store.Claim(ctx, dedupe.Request{Scope: "lease", Key: k}, time.Minute)
		if err != nil {
			t.Fatalf("round %d: Claim: %v", round, err)
		}
		if err := store.Extend(ctx, l, 2*time.Minute); err != nil {
			t.Fatalf("round %d: Extend: %v", round, err)
		}
		if err := store.Complete(ctx, l, []byte("r")); err != nil {
			t.Fatalf("round %d: Complete: %v", round, err)
		}
		l, _, err = store.Claim(ctx, dedupe.Request{Scope: "lease", Key: k + "r"}, time.Minute)
		if err != nil {
			t.Fatalf("round %d: Claim: %v", round, err)
		}
		if err := store.Release(ctx, l); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		if _, err := store.Purge(ctx, 100); err != nil {
			t.Fatalf("round %d: Purge: %v", round, err)
		}
		if _, err := tokens.Purge(ctx, 100); err != nil {
			t.Fatalf("round %d: token Purge: %v", round, err)
		}
		err = harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
			if _, err := store.PurgeTx(ctx, tx, 100); err != nil {
				return err
			}
			_, err := tokens.PurgeTx(ctx, tx, 100)
			return err
		})
		if err != nil {
			t.Fatalf("round %d: PurgeTx: %v", round, err)
		}
	}
	if n := prepares() - before; n != 0 {
		t.Fatalf("the node prepared %d statements, want 0", n)
	}
}

// sqlDB is the handle of a MySQL harness database.
func sqlDB(db harness.DB[*sql.Tx]) *sql.DB { return db.(interface{ SQLDB() *sql.DB }).SQLDB() }
