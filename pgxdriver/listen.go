package pgxdriver

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// sqlListen subscribes the session to the outbox's channel: session
// control, which sqlc generates no code for.
const sqlListen = "LISTEN " + driver.OutboxChannel

var _ driver.OutboxListener = engine{}

// OutboxListen takes a connection of the pool for itself (Hijack: it
// never goes back to the pool, whatever LISTEN left on it), listens on
// driver.OutboxChannel and calls wake on each notification. It needs a
// *pgxpool.Pool: with a *pgx.Conn it would hold the program's only
// connection, and it returns driver.ErrNoRun, as it does through a
// pooler (PgBouncer), told by the server process the startup announced
// (BackendKeyData, which the pooler makes up) differing from the
// session's pg_backend_pid(): in transaction mode a LISTEN stays with a
// server connection other clients get next, and its notifications are
// lost; in session mode it would hold, but is not told apart.
func (e engine) OutboxListen(ctx context.Context, ready, wake func()) error {
	pool, ok := e.db.(*pgxpool.Pool)
	if !ok {
		return driver.ErrNoRun
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	pid, err := e.q.BackendPID(ctx, conn)
	if err != nil {
		return err
	}
	if uint32(pid) != conn.PgConn().PID() {
		return driver.ErrNoRun
	}
	if _, err := conn.Exec(ctx, sqlListen); err != nil {
		return err
	}
	ready()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		wake()
	}
}
