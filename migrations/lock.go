package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pressly/goose/v3/lock"
)

// lockTimeout bounds the wait for another instance's migrations, as goose's
// own session locker does (5 minutes).
const lockTimeout = "5min"

// schemaLockKey is the advisory lock key of the migrations of the schema
// WithSchema names ($2), or else of the one the session's search_path
// resolves first ($2 NULL; $1: lockID). Advisory locks
// belong to the database: a key per schema keeps the migrations of
// sqlonce's tables in different schemas (services, tenants) from waiting
// for each other.
const schemaLockKey = "hashtextextended(coalesce($2::text, current_schema(), ''), $1)"

// txLocker serialises concurrent runs of the PostgreSQL migrations with a
// transaction-scoped advisory lock (pg_advisory_xact_lock on the schema's
// key, schemaLockKey), taken
// by a transaction of its own on a second connection and held until the
// migrations end, when that transaction commits.
//
// goose's session locker takes a session advisory lock and releases it with
// a later statement on the same connection. Through a pooler in transaction
// mode (PgBouncer's pool_mode = transaction) the two statements can reach
// different server connections: the release fails, and the lock stays held
// by a server connection that other clients keep using, until the pooler
// closes it. A transaction keeps its server connection for its whole
// length, through any pooler, and its lock ends with it, even when the
// process dies.
type txLocker struct {
	schema any // WithSchema's name, or nil: the session's current_schema()
	mu     sync.Mutex
	tx     *sql.Tx
	conn   *sql.Conn // tx's, closed (returned to the pool) after it
}

var _ lock.Locker = (*txLocker)(nil)

// secondConnWait bounds the wait for the lock's connection. A handle that
// cannot open a second one (stdlib.OpenDBFromPool on a pool of one
// connection, which database/sql's stats do not show) would wait forever:
// goose holds the first.
const secondConnWait = 2 * time.Second

func (l *txLocker) Lock(ctx context.Context, db *sql.DB) error {
	cctx, cancel := context.WithTimeout(ctx, secondConnWait)
	conn, err := db.Conn(cctx)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// No second connection: run without the lock, as goose does
		// with locking off. Concurrent runs then race on the version
		// table, and all but one fail.
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
		_ = tx.Rollback()
		_ = conn.Close()
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock("+schemaLockKey+")", lockID, l.schema); err != nil {
		_ = tx.Rollback()
		_ = conn.Close()
		return fmt.Errorf("sqlonce/migrations: lock %d: %w", lockID, err)
	}
	l.mu.Lock()
	l.tx, l.conn = tx, conn
	l.mu.Unlock()
	return nil
}

func (l *txLocker) Unlock(context.Context, *sql.DB) error {
	l.mu.Lock()
	tx, conn := l.tx, l.conn
	l.tx, l.conn = nil, nil
	l.mu.Unlock()
	if tx == nil {
		return nil // Lock found no second connection
	}
	err := tx.Commit()
	return errors.Join(err, conn.Close())
}
