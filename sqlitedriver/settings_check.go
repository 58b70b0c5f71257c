package sqlitedriver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"

	"github.com/sqlonce/sqlonce"
)

// checkSettings refuses a handle whose transactions would fail under
// contention instead of waiting for the write lock, as a plain
// sql.Open("sqlite", path) does: a connection with no busy_timeout fails
// with SQLITE_BUSY as soon as another holds the lock, and a transaction
// begun DEFERRED that reads before it writes fails with
// SQLITE_BUSY_SNAPSHOT when another committed in between.
//
// It looks at two of the pool's connections, the one a transaction of
// the handle's begins on and another (PRAGMA busy_timeout), and asks that
// other one to begin IMMEDIATE, without waiting, while the transaction is
// open: it gets the write lock only when the transaction did not take it
// at BEGIN. The other connection, its busy_timeout changed, is closed,
// not returned to the pool. It refuses only on what it saw: a probe that
// cannot run (a database busy beyond the probe's timeout, a pool of one
// connection, a file not there yet) accepts the handle.
func checkSettings(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil // a BEGIN that waited for the lock is IMMEDIATE
	}
	defer tx.Rollback()
	if busy, err := busyTimeout(ctx, tx); err == nil && busy <= 0 {
		return settingsError("has busy_timeout 0: a transaction that meets another's write lock fails at once with SQLITE_BUSY")
	}
	if db.Stats().MaxOpenConnections == 1 {
		return nil // one connection: no second one to ask
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return nil
	}
	defer c.Raw(func(any) error { return sqldriver.ErrBadConn }) // closes it
	busy, err := busyTimeout(ctx, c)
	if err != nil {
		return nil
	}
	if busy <= 0 {
		return settingsError("has busy_timeout 0 on some of its connections (a PRAGMA run on the handle sets one connection only): a transaction that meets another's write lock fails at once with SQLITE_BUSY")
	}
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return nil
	}
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil // the transaction holds the write lock: IMMEDIATE (or another process does)
	}
	_, _ = c.ExecContext(ctx, "ROLLBACK")
	return settingsError("begins its transactions DEFERRED, not IMMEDIATE: one that reads before it writes fails with SQLITE_BUSY_SNAPSHOT when another committed in between")
}

func busyTimeout(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (ms int64, err error) {
	err = q.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms)
	return ms, err
}

func settingsError(what string) error {
	return fmt.Errorf("%w: sqlitedriver: the *sql.DB %s; open the database with modernc.Open or mattn.Open (sqlitedriver/modernc, sqlitedriver/mattn), or sql.Open with modernc.DSN or mattn.DSN, which set _txlock=immediate and busy_timeout",
		sqlonce.ErrInvalidArgument, what)
}
