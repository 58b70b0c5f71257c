package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
		reopen := func(schema string) func(t testing.TB, settings map[string]string) string {
			return func(t testing.TB, settings map[string]string) string {
				return b.Schema(t, schema, settings) + "&default_query_exec_mode=" + mode
			}
		}
		k := keptBounced(t, b, fmt.Sprintf("bouncer-pgx-%s/%d", mode, maxConns), func(schema, dsn string) (any, func() int, func(int), func(), error) {
			db, err := openBouncedPgx(dsn+"&default_query_exec_mode="+mode, schema, maxConns)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			db.reopenDSN = reopen(schema)
			return db, pgxInUse(db.db.Pool), pgxIdle(db.db.Pool), db.db.Pool.Close, nil
		})
		return k.handle.(*pgDB).withDriver(t)
	}
}

// keptBounced is a kept schema (keptFor) of kind reached through bouncer
// b: created and migrated directly on the server, then reached through a
// bouncer database of its own, on a handle open makes.
func keptBounced(t testing.TB, b *pgbouncer.Bouncer, kind string, open func(schema, dsn string) (handle any, inUse func() int, idle func(int), close func(), err error)) *keptSchema {
	t.Helper()
	return keptFor(t, kind, func() *keptSchema {
		direct, drop := testdb.KeptPostgres(t, 2)
		direct.Pool.Close() // the case reaches the schema through the bouncer only
		dsn, reconnect, err := b.KeptSchema(direct.Schema, nil)
		if err != nil {
			_ = drop()
			t.Fatalf("pgbouncer: %v", err)
		}
		handle, inUse, idle, closeHandle, err := open(direct.Schema, dsn)
		if err != nil {
			_ = drop()
			t.Fatal(err)
		}
		return &keptSchema{schema: direct.Schema, handle: handle, inUse: inUse, idle: idle, bounced: true, drop: func() error {
			// The bouncer database stays in the configuration until the
			// bouncer stops (see pgbouncer.Bouncer.Schema): RECONNECT
			// closes its server connections once the handle is closed.
			closeHandle()
			return errors.Join(reconnect(), drop())
		}}
	})
}

// bouncedPgx opens a pgx pool on dsn, a bouncer database of schema,
// closed when t ends.
func bouncedPgx(t testing.TB, dsn, schema string, maxConns int) *pgDB {
	t.Helper()
	db, err := openBouncedPgx(dsn, schema, maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.db.Pool.Close)
	return db.withDriver(t)
}

// openBouncedPgx opens a pgx pool on dsn, a bouncer database of schema,
// without a sqlonce driver (withDriver).
func openBouncedPgx(dsn, schema string, maxConns int) (*pgDB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return &pgDB{db: &testdb.Postgres{Pool: pool, Schema: schema, DSN: dsn}}, nil
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
		params := ""
		switch sqlDriver {
		case "pgx":
			params = "&default_query_exec_mode=exec"
		case "postgres":
			// lib/pq otherwise parses a statement with arguments in
			// one round trip and binds it in another: outside a
			// transaction the bouncer may send the two to different
			// server connections ("unnamed prepared statement does
			// not exist"). binary_parameters=yes sends both at once.
			params = "&binary_parameters=yes"
		}
		return keptBouncedSQL(t, b, "bouncer-sql-"+sqlDriver, sqlDriver, params, maxConns)
	}
}

// keptBouncedSQL is a kept schema through bouncer b (keptBounced) on a
// database/sql handle of sqlDriver, with params after each DSN.
func keptBouncedSQL(t testing.TB, b *pgbouncer.Bouncer, kind, sqlDriver, params string, maxConns int) *pgSQLDB {
	t.Helper()
	k := keptBounced(t, b, fmt.Sprintf("%s/%d", kind, maxConns), func(schema, dsn string) (any, func() int, func(int), func(), error) {
		db, err := openPgSQL(sqlDriver, dsn+params, maxConns)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		db.reopenDSN = func(t testing.TB, settings map[string]string) string {
			return b.Schema(t, schema, settings) + params
		}
		return db, sqlInUse(db.db), sqlIdle(db.db, maxConnsOr8(maxConns)), func() { db.db.Close() }, nil
	})
	return k.handle.(*pgSQLDB).withDriver(t)
}

// PgBouncerPQText is PgBouncerSQL("postgres") without binary_parameters:
// lib/pq as a program opens it by default, which parses a statement with
// arguments in one round trip and binds it in another.
func PgBouncerPQText() Factory[*sql.Tx] {
	return func(t testing.TB, maxConns int) DB[*sql.Tx] {
		t.Helper()
		return keptBouncedSQL(t, pgbouncer.Shared(t), "bouncer-pqtext", "postgres", "", maxConns)
	}
}
