package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
)

// A schema of one's own: the connection's search_path (default database)
// finds a decoy holding sqlonce's tables too, and the driver, built with
// the schema option, must write none of its rows there. Every strategy's
// statements run: claims in a transaction, Store.Run (pgx's pipeline and
// advisory lock), batches, leases in autocommit, Inspect, Forget, Purge,
// PurgeEvery, the inbox and tokens.

func TestSchemaPgx(t *testing.T) {
	decoy, dsn := testdb.EmptyPostgres(t)
	own := ownPostgresSchema(t)
	ctx := ctxSchema(t)
	upDecoyAndOwn(t, ctx, dsn, migrations.Postgres, own)
	pool := pgxPool(t, ctx, dsn)
	exercise(t, ctx, testdrv.Pgx(t, pool, pgxdriver.WithSchema(own)), pgxTx(pool))
	countPostgres(t, ctx, decoy, own)
}

func TestSchemaPgxThroughPgBouncer(t *testing.T) {
	b := pgbouncer.Shared(t)
	decoy, _ := testdb.EmptyPostgres(t)
	own := ownPostgresSchema(t)
	ctx := ctxSchema(t)
	dsn := b.Schema(t, decoy, nil) + "&default_query_exec_mode=exec"
	upDecoyAndOwn(t, ctx, dsn, migrations.Postgres, own)
	pool := pgxPool(t, ctx, dsn)
	exercise(t, ctx, testdrv.Pgx(t, pool, pgxdriver.WithSchema(own)), pgxTx(pool))
	countPostgres(t, ctx, decoy, own)
}

func TestSchemaSQLThroughPgBouncer(t *testing.T) {
	b := pgbouncer.Shared(t)
	decoy, _ := testdb.EmptyPostgres(t)
	own := ownPostgresSchema(t)
	ctx := ctxSchema(t)
	dsn := b.Schema(t, decoy, nil) + "&default_query_exec_mode=exec"
	upDecoyAndOwn(t, ctx, dsn, migrations.Postgres, own)
	db := sqlDB(t, "pgx", dsn)
	exercise(t, ctx, testdrv.PgSQL(t, db, pgsqldriver.WithSchema(own)), sqlTx(db))
	countPostgres(t, ctx, decoy, own)
}

func TestSchemaMySQL(t *testing.T) {
	decoy, dsn := testdb.EmptyMySQL(t)
	own, _ := testdb.EmptyMySQL(t)
	ctx := ctxSchema(t)
	db := sqlDB(t, "mysql", dsn)
	// Up creates the database itself.
	if _, err := db.ExecContext(ctx, "DROP DATABASE "+own); err != nil {
		t.Fatal(err)
	}
	upDecoyAndOwn(t, ctx, dsn, migrations.MySQL, own)
	exercise(t, ctx, testdrv.MySQL(t, db, mysqldriver.WithDatabase(own)), sqlTx(db))
	for _, c := range []struct {
		table string
		want  int64
	}{
		{decoy + ".sqlonce_keys", 0}, {decoy + ".sqlonce_tokens", 0},
		{own + ".sqlonce_keys", wantKeys}, {own + ".sqlonce_tokens", 1},
		{own + "." + migrations.TableName + " WHERE version_id > 0", 4},
	} {
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+c.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s: %d rows, want %d", c.table, n, c.want)
		}
	}
}

// An invalid schema name fails at New (and at Up, before any SQL), with
// an error naming the option and the name, and creates nothing.
func TestSchemaInvalid(t *testing.T) {
	ctx := ctxSchema(t)
	pgSchema, pgDSN := testdb.EmptyPostgres(t)
	myName, myDSN := testdb.EmptyMySQL(t)
	pool := pgxPool(t, ctx, pgDSN)
	pg := sqlDB(t, "pgx", pgDSN)
	my := sqlDB(t, "mysql", myDSN)
	refused := func(what, option string, err error, name string) {
		t.Helper()
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s %q: %v, want ErrInvalidArgument", what, name, err)
			return
		}
		for _, want := range []string{option, strconv.Quote(name)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s %q: %q does not name %s", what, name, err, want)
			}
		}
	}
	for _, name := range []string{"", "Billing", "bill-ing", "1st", `x"; DROP TABLE y; --`, "a_name_of_sixty_four_bytes_is_one_byte_longer_than_postgres_take"} {
		d, err := pgxdriver.New(pool, pgxdriver.WithSchema(name))
		refused("pgxdriver", "WithSchema", err, name)
		if d != nil {
			t.Errorf("pgxdriver %q: a driver with the error", name)
		}
		_, err = pgsqldriver.New(pg, pgsqldriver.WithSchema(name))
		refused("pgsqldriver", "WithSchema", err, name)
		_, err = mysqldriver.New(my, mysqldriver.WithDatabase(name))
		refused("mysqldriver", "WithDatabase", err, name)
		refused("migrations on PostgreSQL", "WithSchema", migrations.Up(ctx, pg, migrations.Postgres, migrations.WithSchema(name)), name)
		refused("migrations on MySQL", "WithSchema", migrations.Up(ctx, my, migrations.MySQL, migrations.WithSchema(name)), name)
	}
	for _, o := range []error{
		func() error { _, err := pgxdriver.New(pool, nil); return err }(),
		func() error { _, err := pgsqldriver.New(pg, nil); return err }(),
		func() error { _, err := mysqldriver.New(my, nil); return err }(),
		migrations.Up(ctx, pg, migrations.Postgres, nil),
	} {
		if !errors.Is(o, sqlonce.ErrInvalidArgument) {
			t.Errorf("a nil option: %v, want ErrInvalidArgument", o)
		}
	}
	lite, err := modernc.Open(testdb.EmptySQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	if err := migrations.Up(ctx, lite, migrations.SQLite, migrations.WithSchema("x")); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("migrations on SQLite with a schema: %v, want ErrInvalidArgument", err)
	}
	wantNoTables(t, ctx, pg, my, lite, pgSchema, myName)
}

// wantKeys is how many rows of sqlonce_keys exercise leaves: do, run,
// batch-1, batch-2, leased, inbox's m1, the purger's lease.
const wantKeys = 7

func exercise[TTx any](t *testing.T, ctx context.Context, drv sqlonce.Driver[TTx], inTx func(context.Context, func(TTx) error) error) {
	t.Helper()
	s, err := dedupe.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, res sqlonce.Result, err error, want sqlonce.Outcome) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Outcome != want {
			t.Fatalf("%s: %v, want %v", what, res.Outcome, want)
		}
	}
	for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
		var res sqlonce.Result
		err := inTx(ctx, func(tx TTx) error {
			var err error
			res, err = s.Do(ctx, tx, dedupe.Request{Scope: "s", Key: "do"}, func(context.Context) error { return nil })
			return err
		})
		check(fmt.Sprintf("Do %d", i), res, err, want)
		res, err = s.Run(ctx, dedupe.Request{Scope: "s", Key: "run"}, func(context.Context, TTx) ([]byte, error) { return []byte("r"), nil })
		check(fmt.Sprintf("Run %d", i), res, err, want)
		rs, err := s.RunBatch(ctx, "s", []string{"batch-1", "batch-2"}, func(context.Context, TTx, []string) error { return nil })
		if err != nil || len(rs) != 2 {
			t.Fatalf("RunBatch %d: %v %v", i, rs, err)
		}
		check(fmt.Sprintf("RunBatch %d", i), rs[1], nil, want)
	}
	// Leases, in autocommit where the driver can.
	l, res, err := s.Claim(ctx, dedupe.Request{Scope: "s", Key: "leased"}, time.Minute)
	check("Claim", res, err, sqlonce.FirstRun)
	if err := s.Extend(ctx, l, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, l, []byte("done")); err != nil {
		t.Fatal(err)
	}
	l, res, err = s.Claim(ctx, dedupe.Request{Scope: "s", Key: "released"}, time.Minute)
	check("Claim released", res, err, sqlonce.FirstRun)
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Inspect(ctx, "s", "leased"); err != nil || info.State != dedupe.KeyDone {
		t.Fatalf("Inspect: %+v %v", info, err)
	}
	if err := s.Forget(ctx, "s", "released"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Purge(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// One round of PurgeEvery: its lease row lands in the schema too.
	pctx, stop := context.WithCancel(ctx)
	rounds := make(chan sqlonce.Event, 1)
	ps, err := dedupe.New(sqlonce.Observe(drv, sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) {
		if e.Operation == "PurgeEvery" {
			select {
			case rounds <- e:
			default:
			}
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ps.PurgeEvery(pctx, time.Hour) }()
	if e := <-rounds; e.Status != sqlonce.EventFirstRun {
		t.Fatalf("PurgeEvery's round: %v %v", e.Status, e.Err)
	}
	stop()
	<-done

	in, err := inbox.New(drv, "consumer")
	if err != nil {
		t.Fatal(err)
	}
	// The inbox's message lives in its own namespace: "m1" is a row.
	res, err = in.Handle(ctx, "m1", func(context.Context, TTx) error { return nil })
	check("inbox", res, err, sqlonce.FirstRun)

	tokens, err := token.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.Issue(ctx, "form")
	if err != nil {
		t.Fatal(err)
	}
	err = inTx(ctx, func(tx TTx) error {
		res, err = tokens.Consume(ctx, tx, "form", tok)
		return err
	})
	check("token", res, err, sqlonce.FirstRun)
	if _, err := tokens.Purge(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

func ctxSchema(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ownPostgresSchema names a schema for t that does not exist yet (Up
// creates it), dropped when t ends.
func ownPostgresSchema(t *testing.T) string {
	own, _ := testdb.EmptyPostgres(t)
	admin := sqlDB(t, "pgx", testdb.PostgresDSN(t))
	if _, err := admin.Exec("DROP SCHEMA " + own); err != nil {
		t.Fatal(err)
	}
	return own
}

// upDecoyAndOwn migrates the schema the DSN finds (the decoy) and own,
// through the DSN (a bouncer's, where it is one).
func upDecoyAndOwn(t *testing.T, ctx context.Context, dsn string, d migrations.Dialect, own string) {
	t.Helper()
	driverName := "pgx"
	if d == migrations.MySQL {
		driverName = "mysql"
	}
	db := sqlDB(t, driverName, dsn)
	if err := migrations.Up(ctx, db, d); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second finds everything applied
		if err := migrations.Up(ctx, db, d, migrations.WithSchema(own)); err != nil {
			t.Fatal(err)
		}
	}
}

func countPostgres(t *testing.T, ctx context.Context, decoy, own string) {
	t.Helper()
	db := sqlDB(t, "pgx", testdb.PostgresDSN(t))
	for _, c := range []struct {
		table string
		want  int64
	}{
		{decoy + ".sqlonce_keys", 0}, {decoy + ".sqlonce_tokens", 0},
		{own + ".sqlonce_keys", wantKeys}, {own + ".sqlonce_tokens", 1},
		{own + "." + migrations.TableName + " WHERE version_id > 0", 4},
	} {
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+c.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("%s: %d rows, want %d", c.table, n, c.want)
		}
	}
}

func sqlDB(t *testing.T, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

func pgxPool(t *testing.T, ctx context.Context, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func pgxTx(pool *pgxpool.Pool) func(context.Context, func(pgx.Tx) error) error {
	return func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) }
}

func sqlTx(db *sql.DB) func(context.Context, func(*sql.Tx) error) error {
	return func(ctx context.Context, fn func(*sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}
