package harness

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// lockWaiter is a DB that can tell whether a connection waits for a row
// lock.
type lockWaiter interface {
	lockWaiting(ctx context.Context, connID int64) (bool, error)
}

// WaitLockWait returns once the connection connID (ConnID of an open
// transaction) waits for a lock held by another transaction, as the
// server reports it (pg_stat_activity; on MySQL/MariaDB, the processlist).
// Deadlock cases use it to make one transaction wait before the other
// closes the cycle. PostgreSQL aborts the waiter whose deadlock check,
// run once deadlock_timeout after it began to wait, finds the cycle: a
// case that needs the closing transaction to be the victim puts the first
// waiter's check off (SET LOCAL deadlock_timeout = '60s', TxExec), since
// on a loaded machine the first waiter's check can come before the cycle
// closes. A fixed pause did that on a quiet machine only. On a DB
// without row locks (SQLite) it returns at once.
func WaitLockWait[TTx any](ctx context.Context, db DB[TTx], connID int64) error {
	w, ok := any(db).(lockWaiter)
	if !ok {
		return nil
	}
	for {
		waiting, err := w.lockWaiting(ctx, connID)
		if err != nil {
			return fmt.Errorf("lock wait of connection %d: %w", connID, err)
		}
		if waiting {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connection %d never waited for a lock: %w", connID, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

const (
	pgLockWaiting = `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`
	// MySQL/MariaDB: the connection is running a statement. The cases
	// call WaitLockWait once the connection has sent the statement that
	// waits (its earlier ones have returned), so running means waiting.
	// information_schema.innodb_trx would say LOCK WAIT, but MariaDB
	// serves it from a cache refreshed only when 100 ms passed since its
	// last read: polled more often than that (by this loop, or by tests
	// running beside it) it never changes.
	myLockWaiting = `SELECT count(*) FROM information_schema.processlist
		WHERE id = ? AND command IN ('Query', 'Execute') AND info IS NOT NULL`
)

func (p *pgDB) lockWaiting(ctx context.Context, connID int64) (bool, error) {
	var n int64
	err := p.db.Pool.QueryRow(ctx, pgLockWaiting, connID).Scan(&n)
	return n > 0, err
}

func (p *pgSQLDB) lockWaiting(ctx context.Context, connID int64) (bool, error) {
	return countPositive(ctx, p.db, pgLockWaiting, connID)
}

func (m *myDB) lockWaiting(ctx context.Context, connID int64) (bool, error) {
	return countPositive(ctx, m.db.DB, myLockWaiting, connID)
}

func (s *spreadDB) lockWaiting(ctx context.Context, connID int64) (bool, error) {
	w, ok := s.nodes[connID&0xff].(lockWaiter)
	if !ok {
		return true, nil
	}
	return w.lockWaiting(ctx, connID>>8)
}

func countPositive(ctx context.Context, db *sql.DB, query string, args ...any) (bool, error) {
	var n int64
	err := db.QueryRowContext(ctx, query, args...).Scan(&n)
	return n > 0, err
}
