package sqlitedriver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
)

// checkSettings refuses a handle whose transactions would fail under
// contention instead of waiting for the write lock, as a plain
// sql.Open("sqlite", path) does: a connection with no busy_timeout fails
// with SQLITE_BUSY as soon as another holds the lock, and a transaction
// begun DEFERRED that reads before it writes fails with
// SQLITE_BUSY_SNAPSHOT when another committed in between.
//
// It looks at two of the pool's connections, one to begin a transaction
// on and another (PRAGMA busy_timeout), and asks that other one to begin
// IMMEDIATE, without waiting, while the transaction is open: it gets the
// write lock only when the transaction did not take it at BEGIN. It takes
// both connections before it begins, each within slotTimeout, so that
// nothing is locked while it waits for a slot of a busy pool (BEGIN with
// _txlock=immediate takes the write lock). The other connection, its
// busy_timeout changed, is closed, not returned to the pool. It refuses
// only on what it saw: a probe that cannot run (a pool whose connections
// are all in use, a database busy beyond the probe's timeout, a pool of
// one connection, a file not there yet) accepts the handle, or checks
// only what it could.
func checkSettings(db *sql.DB) error {
	conn := func() *sql.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
		defer cancel()
		c, err := db.Conn(ctx)
		if err != nil {
			return nil
		}
		return c
	}
	tc := conn()
	if tc == nil {
		return nil
	}
	defer tc.Close()
	var c *sql.Conn // nil: one connection, no second one to ask
	if db.Stats().MaxOpenConnections != 1 {
		if c = conn(); c != nil {
			defer c.Raw(func(any) error { return sqldriver.ErrBadConn }) // closes it
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	tx, err := tc.BeginTx(ctx, nil)
	if err != nil {
		return nil // a BEGIN that waited for the lock is IMMEDIATE
	}
	defer tx.Rollback()
	if busy, err := busyTimeout(ctx, tx); err == nil && busy <= 0 {
		return settingsError("has busy_timeout 0: a transaction that meets another's write lock fails at once with SQLITE_BUSY")
	}
	if c == nil {
		return nil
	}
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

// slotTimeout bounds checkSettings' wait for each of its two connections:
// a pool whose connections are all in use is not waited for.
const slotTimeout = 100 * time.Millisecond

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
