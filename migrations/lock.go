package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/pressly/goose/v3/lock"
)

// lockTimeout bounds the wait for another instance's migrations, as goose's
// own session locker does (5 minutes).
const lockTimeout = "5min"

// txLocker serialises concurrent runs of the PostgreSQL migrations with a
// transaction-scoped advisory lock (pg_advisory_xact_lock on lockID), taken
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
	mu sync.Mutex
	tx *sql.Tx
}

var _ lock.Locker = (*txLocker)(nil)

func (l *txLocker) Lock(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", lockID); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("sqlonce/migrations: lock %d: %w", lockID, err)
	}
	l.mu.Lock()
	l.tx = tx
	l.mu.Unlock()
	return nil
}

func (l *txLocker) Unlock(context.Context, *sql.DB) error {
	l.mu.Lock()
	tx := l.tx
	l.tx = nil
	l.mu.Unlock()
	if tx == nil {
		return errors.New("sqlonce/migrations: unlock without a lock")
	}
	return tx.Commit()
}
