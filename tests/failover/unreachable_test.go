package failover

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// TestUnreachablePostgres: while the primary is gone and nothing has
// taken its place (killed, the standby not yet promoted), a connection
// cannot even be opened, and nothing reaches a server. A lease's Claim,
// Complete, Extend and Release and token.Issue, each one statement in
// autocommit on PostgreSQL, must answer a lost connection then
// (ErrorType "conn_lost", as docs/deployments.md promises and MySQL
// answers), not ErrCommitUnknown: no COMMIT was sent. Through pgx's pool,
// pgx's database/sql adapter and lib/pq. (A cut at COMMIT still answers
// ErrCommitUnknown: tests/commitloss.)
func TestUnreachablePostgres(t *testing.T) {
	srv, err := dbserver.NewPostgres()
	need(t, "throwaway PostgreSQL", err)
	t.Cleanup(srv.Remove)
	migrate(t, srv.DSN)

	pool := pgPool(t, srv.DSN, 4)
	pgxStore, err := dedupe.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	pgxTokens, err := token.New(testdrv.Pgx(t, pool))
	if err != nil {
		t.Fatal(err)
	}
	pgxCalls := unreachableCalls(t, pgxStore, pgxTokens)

	sqlCalls := map[string]func(ctx context.Context) []call{}
	var dbs []*sql.DB
	for _, lib := range []string{"pgx", "postgres"} {
		db, err := sql.Open(lib, srv.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
		s, err := dedupe.New(testdrv.PgSQL(t, db))
		if err != nil {
			t.Fatal(err)
		}
		tk, err := token.New(testdrv.PgSQL(t, db))
		if err != nil {
			t.Fatal(err)
		}
		sqlCalls[lib] = unreachableCalls(t, s, tk)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The leases are claimed while the server is up.
	byDriver := map[string][]call{
		"pgx":              pgxCalls(ctx),
		"database/sql+pgx": sqlCalls["pgx"](ctx),
		"lib/pq":           sqlCalls["postgres"](ctx),
	}
	if err := srv.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// No connection of the handles' survives: every call opens one.
	pool.Reset()
	for _, db := range dbs {
		db.SetMaxIdleConns(0)
	}
	for _, name := range []string{"pgx", "database/sql+pgx", "lib/pq"} {
		for _, c := range byDriver[name] {
			t.Run(name+"/"+c.name, func(t *testing.T) { checkUnreachable(t, c.do(ctx)) })
		}
	}
}

// TestUnreachableMariaDB is TestUnreachablePostgres on MariaDB, whose
// driver answered a lost connection there already.
func TestUnreachableMariaDB(t *testing.T) {
	srv, err := dbserver.NewMariaDB()
	need(t, "throwaway MariaDB", err)
	t.Cleanup(srv.Remove)
	root, err := sql.Open("mysql", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	mustExec(t, root, "CREATE DATABASE app")
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/app?parseTime=true", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		t.Fatal(err)
	}
	s, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := token.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	calls := unreachableCalls(t, s, tk)(ctx)
	if err := srv.Stop(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) { checkUnreachable(t, c.do(ctx)) })
	}
}

// checkUnreachable checks the error of a call made while no connection
// could be opened.
func checkUnreachable(t *testing.T, err error) {
	t.Helper()
	t.Logf("%v", err)
	switch {
	case err == nil:
		t.Fatal("succeeded with the server stopped")
	case errors.Is(err, sqlonce.ErrCommitUnknown) || sqlonce.IsCommitUnknown(err):
		t.Fatalf("%v: ErrCommitUnknown, though no connection could be opened and nothing was sent", err)
	case sqlonce.ErrorType(err) != "conn_lost":
		t.Fatalf("ErrorType(%v) = %q, want conn_lost", err, sqlonce.ErrorType(err))
	}
}

// call is one call that needs the database.
type call struct {
	name string
	do   func(ctx context.Context) error
}

// unreachableCalls returns a function that claims the leases the calls
// need (while the server is up) and returns the calls.
func unreachableCalls[TTx any](t *testing.T, s *dedupe.Store[TTx], tk *token.Store[TTx]) func(ctx context.Context) []call {
	return func(ctx context.Context) []call {
		t.Helper()
		lease := func(key string) *dedupe.Lease {
			l, res, err := s.Claim(ctx, dedupe.Request{Scope: "unreachable", Key: fmt.Sprintf("%s-%p", key, s)}, time.Minute)
			if err != nil || !res.FirstRun() {
				t.Fatalf("claim %s: %v, %v", key, res, err)
			}
			return l
		}
		complete, extend, release := lease("complete"), lease("extend"), lease("release")
		return []call{
			{"Claim", func(ctx context.Context) error {
				_, _, err := s.Claim(ctx, dedupe.Request{Scope: "unreachable", Key: "new"}, time.Minute)
				return err
			}},
			{"Complete", func(ctx context.Context) error { return s.Complete(ctx, complete, []byte("done")) }},
			{"Extend", func(ctx context.Context) error { return s.Extend(ctx, extend, time.Minute) }},
			{"Release", func(ctx context.Context) error { return s.Release(ctx, release) }},
			{"Issue", func(ctx context.Context) error {
				_, err := tk.Issue(ctx, "unreachable")
				return err
			}},
		}
	}
}
