package harness

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// PgBouncerPgx is the Factory for pgxdriver through a PgBouncer in
// transaction pooling mode, with pgx's query exec mode mode: pgx's default,
// cache_statement, cannot work through PgBouncer 1.18 (see pgxdriver's
// package documentation). Each mode has a bouncer of its own, so that the
// configurations can run in parallel. The schema is created and migrated
// directly on the server, then reached through a bouncer database of its
// own.
func PgBouncerPgx(mode string) Factory[pgx.Tx] {
	return func(t testing.TB, maxConns int) DB[pgx.Tx] {
		t.Helper()
		b := pgbouncer.Named(t, "pgx-"+mode)
		direct := testdb.NewPostgres(t, 2)
		direct.Pool.Close() // the case reaches the schema through the bouncer only
		reopen := func(t testing.TB, settings map[string]string) string {
			return b.Schema(t, direct.Schema, settings) + "&default_query_exec_mode=" + mode
		}
		db := bouncedPgx(t, reopen(t, nil), direct.Schema, maxConns)
		db.reopenDSN = reopen
		return db
	}
}

// bouncedPgx opens a pgx pool on dsn, a bouncer database of schema.
func bouncedPgx(t testing.TB, dsn, schema string, maxConns int) *pgDB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &pgDB{db: &testdb.Postgres{Pool: pool, Schema: schema, DSN: dsn}, driver: pgxdriver.New(pool)}
}

// PgBouncerSQL is the Factory for pgsqldriver through a PgBouncer in
// transaction pooling mode, with the database/sql driver sqlDriver: "pgx"
// (in exec mode "exec": its default statement cache cannot work through
// the bouncer either) or "postgres" (lib/pq, with binary_parameters=yes),
// each on a bouncer of its own.
func PgBouncerSQL(sqlDriver string) Factory[*sql.Tx] {
	return func(t testing.TB, maxConns int) DB[*sql.Tx] {
		t.Helper()
		b := pgbouncer.Named(t, "sql-"+sqlDriver)
		direct := testdb.NewPostgres(t, 2)
		direct.Pool.Close() // the case reaches the schema through the bouncer only
		reopen := func(t testing.TB, settings map[string]string) string {
			dsn := b.Schema(t, direct.Schema, settings)
			switch sqlDriver {
			case "pgx":
				dsn += "&default_query_exec_mode=exec"
			case "postgres":
				// lib/pq otherwise parses a statement with arguments in
				// one round trip and binds it in another: outside a
				// transaction the bouncer may send the two to different
				// server connections ("unnamed prepared statement does
				// not exist"). binary_parameters=yes sends both at once.
				dsn += "&binary_parameters=yes"
			}
			return dsn
		}
		db := newPgSQL(t, sqlDriver, reopen(t, nil), maxConns)
		db.reopenDSN = reopen
		return db
	}
}

// PgBouncerPQText is PgBouncerSQL("postgres") without binary_parameters:
// lib/pq as a program opens it by default, which parses a statement with
// arguments in one round trip and binds it in another.
func PgBouncerPQText() Factory[*sql.Tx] {
	return func(t testing.TB, maxConns int) DB[*sql.Tx] {
		t.Helper()
		b := pgbouncer.Shared(t)
		direct := testdb.NewPostgres(t, 2)
		direct.Pool.Close()
		reopen := func(t testing.TB, settings map[string]string) string {
			return b.Schema(t, direct.Schema, settings)
		}
		db := newPgSQL(t, "postgres", reopen(t, nil), maxConns)
		db.reopenDSN = reopen
		return db
	}
}
