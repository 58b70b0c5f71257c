package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/mysqlbiz"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/pgbiz"
	"github.com/sqlonce/sqlonce/tests/internal/wire"
)

// obEnv is what the outbox comparison needs of one database handle: the
// business transaction, sqlonce's outbox Store, and watermill-sql's
// adapters for the same database. pgx on PostgreSQL, database/sql on
// MariaDB, as the rest of cmd/bench.
type obEnv[TTx any] struct {
	name     string
	begin    func(ctx context.Context) (TTx, error)
	commit   func(ctx context.Context, tx TTx) error
	rollback func(ctx context.Context, tx TTx) error
	// ledger is the business write: one ledger INSERT.
	ledger func(ctx context.Context, tx TTx, ref string) error
	store  *outbox.Store[TTx]
	// quiet enqueues without notifying the relays (outbox.WithoutNotify):
	// PostgreSQL only, nil elsewhere (no engine but PostgreSQL notifies).
	quiet *outbox.Store[TTx]

	wmSchema   wmsql.SchemaAdapter
	wmOffsets  wmsql.OffsetsAdapter
	wmBeginner wmsql.Beginner
	// wmExec is the caller's transaction as watermill-sql's Publisher takes it.
	wmExec func(tx TTx) wmsql.ContextExecutor
	// wmBacklog counts the rows of a forwarder topic that its consumer
	// group has not acknowledged yet.
	wmBacklog func(ctx context.Context, topic string) (int64, error)
	// counts reads the wire proxy's counters (round-trip env only).
	counts func() wire.Counts
	reset  func()
	close  func()
}

func pgOutboxEnv(pool *pgxpool.Pool) (*obEnv[pgx.Tx], error) {
	drv, err := pgxdriver.New(pool)
	if err != nil {
		return nil, err
	}
	store, err := outbox.New(drv)
	if err != nil {
		return nil, err
	}
	quiet, err := outbox.New(drv, outbox.WithoutNotify())
	if err != nil {
		return nil, err
	}
	schema := wmsql.DefaultPostgreSQLSchema{}
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{}
	return &obEnv[pgx.Tx]{
		name:     "postgres",
		begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		ledger: func(ctx context.Context, tx pgx.Tx, ref string) error {
			return pgbiz.New(tx).LedgerInsert(ctx, pgbiz.LedgerInsertParams{Ref: ref, Amount: 100})
		},
		store:      store,
		quiet:      quiet,
		wmSchema:   schema,
		wmOffsets:  offsets,
		wmBeginner: wmsql.BeginnerFromPgx(pool),
		wmExec:     func(tx pgx.Tx) wmsql.ContextExecutor { return wmsql.TxFromPgx(tx) },
		wmBacklog: func(ctx context.Context, topic string) (int64, error) {
			var n int64
			err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema.MessagesTable(topic)+` m
				WHERE (m.transaction_id, m."offset") > (SELECT o.last_processed_transaction_id, o.offset_acked
					FROM `+offsets.MessagesOffsetsTable(topic)+` o WHERE o.consumer_group = '')`).Scan(&n)
			return n, err
		},
		close: func() {},
	}, nil
}

func myOutboxEnv(db *sql.DB) (*obEnv[*sql.Tx], error) {
	drv, err := mysqldriver.New(db)
	if err != nil {
		return nil, err
	}
	store, err := outbox.New(drv)
	if err != nil {
		return nil, err
	}
	schema := wmsql.DefaultMySQLSchema{}
	offsets := wmsql.DefaultMySQLOffsetsAdapter{}
	return &obEnv[*sql.Tx]{
		name:     "mysql",
		begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		ledger: func(ctx context.Context, tx *sql.Tx, ref string) error {
			return mysqlbiz.New(tx).LedgerInsert(ctx, mysqlbiz.LedgerInsertParams{Ref: ref, Amount: 100})
		},
		store:      store,
		wmSchema:   schema,
		wmOffsets:  offsets,
		wmBeginner: wmsql.BeginnerFromStdSQL(db),
		wmExec:     func(tx *sql.Tx) wmsql.ContextExecutor { return wmsql.TxFromStdSQL(tx) },
		wmBacklog: func(ctx context.Context, topic string) (int64, error) {
			var n int64
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+schema.MessagesTable(topic)+
				" WHERE `offset` > COALESCE((SELECT offset_acked FROM "+offsets.MessagesOffsetsTable(topic)+
				" WHERE consumer_group = ''), 0)").Scan(&n)
			return n, err
		},
		close: func() {},
	}, nil
}

// outboxEnvOf is the env on a backend's own pool.
func outboxEnvOf[TTx any](b backend[TTx]) (*obEnv[TTx], error) {
	var env any
	var err error
	switch b := any(b).(type) {
	case *pgBackend:
		env, err = pgOutboxEnv(b.pool)
	case *myBackend:
		env, err = myOutboxEnv(b.db)
	default:
		return nil, fmt.Errorf("no outbox env for %T", b)
	}
	if err != nil {
		return nil, err
	}
	return env.(*obEnv[TTx]), nil
}

// countedEnvOf is an env on one connection to b's schema or database
// through a wire proxy, to count round trips and statements.
func countedEnvOf[TTx any](ctx context.Context, b backend[TTx], server string) (*obEnv[TTx], error) {
	var (
		env   any
		p     *wire.Proxy
		close func()
	)
	switch b := any(b).(type) {
	case *pgBackend:
		sep := "?"
		if strings.Contains(server, "?") {
			sep = "&"
		}
		cfg, err := pgxpool.ParseConfig(server + sep + "search_path=" + b.schema)
		if err != nil {
			return nil, err
		}
		if p, err = wire.Listen("postgres", fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), 0); err != nil {
			return nil, err
		}
		host, port, _ := strings.Cut(p.Addr(), ":")
		n, _ := strconv.Atoi(port)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
		cfg.MaxConns, cfg.MinConns = 1, 0
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			p.Close()
			return nil, err
		}
		close = func() { pool.Close(); p.Close() }
		if env, err = pgOutboxEnv(pool); err != nil {
			close()
			return nil, err
		}
	case *myBackend:
		cfg, err := mysql.ParseDSN(server)
		if err != nil {
			return nil, err
		}
		if p, err = wire.Listen("mysql", cfg.Addr, 0); err != nil {
			return nil, err
		}
		cfg.Addr, cfg.DBName, cfg.ParseTime = p.Addr(), b.dbName, true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			p.Close()
			return nil, err
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		close = func() { db.Close(); p.Close() }
		if env, err = myOutboxEnv(db); err != nil {
			close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("no outbox env for %T", b)
	}
	e := env.(*obEnv[TTx])
	e.counts, e.reset, e.close = p.Counts, p.Reset, close
	return e, nil
}
