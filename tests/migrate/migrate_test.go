// Package migrate_test checks both ways of installing sqlonce's schema: the
// embedded migrations run from code, and the migration folders run by the
// application's own goose (as the goose command line does).
package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// latest is the version of sqlonce's newest migration.
const latest = 4

// tables are the tables sqlonce's migrations create.
var tables = []string{"sqlonce_keys", "sqlonce_tokens", "sqlonce_outbox"}

// conn is a database/sql handle for goose, and the pgx pool behind it on
// PostgreSQL.
type conn struct {
	db   *sql.DB
	pool *pgxpool.Pool
}

type target struct {
	dialect migrations.Dialect
	open    func(t *testing.T) conn
	// works runs a dedupe claim twice and returns the two outcomes.
	works func(t *testing.T, c conn) []sqlonce.Outcome
}

func targets() []target {
	return []target{
		{
			dialect: migrations.Postgres,
			open: func(t *testing.T) conn {
				_, dsn := testdb.EmptyPostgres(t)
				pool, err := pgxpool.New(context.Background(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				db := stdlib.OpenDBFromPool(pool)
				t.Cleanup(func() { db.Close() })
				return conn{db: db, pool: pool}
			},
			works: func(t *testing.T, c conn) []sqlonce.Outcome {
				pool := c.pool
				store, err := dedupe.New(testdrv.Pgx(t, pool))
				if err != nil {
					t.Fatal(err)
				}
				var out []sqlonce.Outcome
				for range 2 {
					err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
						res, err := store.Do(context.Background(), tx, dedupe.Request{Scope: "m", Key: "k"}, func(context.Context) error { return nil })
						out = append(out, res.Outcome)
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				return out
			},
		},
		{
			dialect: migrations.MySQL,
			open: func(t *testing.T) conn {
				_, dsn := testdb.EmptyMySQL(t)
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return conn{db: db}
			},
			works: func(t *testing.T, c conn) []sqlonce.Outcome {
				return sqlWorks(t, c.db, testdrv.MySQL(t, c.db))
			},
		},
		{
			dialect: migrations.SQLite,
			open: func(t *testing.T) conn {
				db, err := modernc.Open(testdb.EmptySQLite(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return conn{db: db}
			},
			works: func(t *testing.T, c conn) []sqlonce.Outcome {
				d, err := sqlitedriver.New(c.db)
				if err != nil {
					t.Fatal(err)
				}
				return sqlWorks(t, c.db, d)
			},
		},
	}
}

// sqlWorks is works for the drivers on database/sql.
func sqlWorks(t *testing.T, db *sql.DB, d sqlonce.Driver[*sql.Tx]) []sqlonce.Outcome {
	store, err := dedupe.New(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []sqlonce.Outcome
	for range 2 {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Do(context.Background(), tx, dedupe.Request{Scope: "m", Key: "k"}, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Outcome)
	}
	return out
}

func wantOnce(t *testing.T, got []sqlonce.Outcome) {
	t.Helper()
	if len(got) != 2 || got[0] != sqlonce.FirstRun || got[1] != sqlonce.AlreadyDone {
		t.Fatalf("outcomes %v, want [first run, already done]", got)
	}
}

func tableExists(t *testing.T, db *sql.DB, d migrations.Dialect, table string) bool {
	t.Helper()
	q := "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
	switch d {
	case migrations.MySQL:
		q = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	case migrations.SQLite:
		q = "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?"
	}
	var n int
	if err := db.QueryRow(q, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// The embedded migrations keep their own version table, next to the
// application's goose table, and can go down and up again.
func TestEmbedded(t *testing.T) {
	for _, tg := range targets() {
		t.Run(string(tg.dialect), func(t *testing.T) {
			ctx := context.Background()
			c := tg.open(t)
			db := c.db
			// The application's own goose table, with a version of its own.
			if _, err := db.Exec("CREATE TABLE goose_db_version (id int, version_id bigint, is_applied boolean, tstamp timestamp)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("INSERT INTO goose_db_version VALUES (1, 42, true, CURRENT_TIMESTAMP)"); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := migrations.Up(ctx, db, tg.dialect); err != nil {
					t.Fatal(err)
				}
			}
			p, err := migrations.NewProvider(tg.dialect, db)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := p.GetDBVersion(ctx); err != nil || v != latest {
				t.Fatalf("version %d, %v; want %d", v, err, latest)
			}
			var appRows int
			if err := db.QueryRow("SELECT count(*) FROM goose_db_version").Scan(&appRows); err != nil || appRows != 1 {
				t.Fatalf("application goose table has %d rows (%v), want its 1 row untouched", appRows, err)
			}
			wantOnce(t, tg.works(t, c))

			for _, table := range tables {
				if !tableExists(t, db, tg.dialect, table) {
					t.Fatalf("%s missing after up", table)
				}
			}
			if _, err := p.DownTo(ctx, 0); err != nil {
				t.Fatal(err)
			}
			for _, table := range tables {
				if tableExists(t, db, tg.dialect, table) {
					t.Fatalf("%s still there after down", table)
				}
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatal(err)
			}
			wantOnce(t, tg.works(t, c))
		})
	}
}

// Several instances starting at once all run Up on one handle; the
// migrations apply once (TestFleetUp: on handles of their own).
func TestEmbeddedConcurrentUp(t *testing.T) {
	for _, tg := range targets() {
		t.Run(string(tg.dialect), func(t *testing.T) {
			c := tg.open(t)
			db := c.db
			errs := make(chan error, 4)
			for range 4 {
				go func() { errs <- migrations.Up(context.Background(), db, tg.dialect) }()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			wantOnce(t, tg.works(t, c))
		})
	}
}

// The application's own goose, pointed at the folder on disk with the
// table name sqlonce documents: what `goose -dir migrations/<dialect>
// -table sqlonce_goose_db_version <driver> "$DSN" up` does.
func TestOwnGooseOnFolder(t *testing.T) {
	for _, tg := range targets() {
		t.Run(string(tg.dialect), func(t *testing.T) {
			c := tg.open(t)
			db := c.db
			goose.SetTableName(migrations.TableName)
			t.Cleanup(func() { goose.SetTableName("goose_db_version") })
			if err := goose.SetDialect(string(tg.dialect)); err != nil {
				t.Fatal(err)
			}
			dir := fmt.Sprintf("../../migrations/%s", tg.dialect)
			if err := goose.UpContext(context.Background(), db, dir); err != nil {
				t.Fatal(err)
			}
			v, err := goose.GetDBVersion(db)
			if err != nil || v != latest {
				t.Fatalf("version %d, %v", v, err)
			}
			wantOnce(t, tg.works(t, c))
			// The embedded provider agrees: nothing pending.
			p, err := migrations.NewProvider(tg.dialect, db)
			if err != nil {
				t.Fatal(err)
			}
			if pending, err := p.HasPending(context.Background()); err != nil || pending {
				t.Fatalf("embedded provider sees pending=%v (%v) after goose on the folder", pending, err)
			}
		})
	}
}

// A key recorded before migration 00003 (namespaces) is a dedupe key after
// it: the upgrade keeps every row, and a dedupe repeat of it is still
// AlreadyDone. Down takes the column away again and keeps the rows.
func TestUpgradeKeepsKeysAsDedupe(t *testing.T) {
	insert := map[migrations.Dialect]string{
		migrations.Postgres: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES ('m', 'k', 1, 1, now(), now() + interval '1 day')`,
		migrations.MySQL: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES ('m', 'k', 1, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`,
		migrations.SQLite: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES ('m', 'k', 1, 1, CAST(unixepoch() AS INTEGER) * 1000000, (CAST(unixepoch() AS INTEGER) + 86400) * 1000000)`,
	}
	for _, tg := range targets() {
		t.Run(string(tg.dialect), func(t *testing.T) {
			ctx := context.Background()
			c := tg.open(t)
			p, err := migrations.NewProvider(tg.dialect, c.db)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpTo(ctx, 2); err != nil {
				t.Fatal(err)
			}
			if _, err := c.db.Exec(insert[tg.dialect]); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Up(ctx); err != nil {
				t.Fatal(err)
			}
			got := tg.works(t, c)
			if len(got) != 2 || got[0] != sqlonce.AlreadyDone || got[1] != sqlonce.AlreadyDone {
				t.Fatalf("outcomes %v after the upgrade, want [already done, already done]", got)
			}
			if _, err := p.DownTo(ctx, 2); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := c.db.QueryRow("SELECT count(*) FROM sqlonce_keys WHERE scope = 'm' AND idempotency_key = 'k'").Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d rows for m/k after down (%v), want 1", n, err)
			}
		})
	}
}
