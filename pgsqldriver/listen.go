package pgsqldriver

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"reflect"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// sqlListen subscribes the session to the outbox's channel: session
// control, which sqlc generates no code for.
const sqlListen = "LISTEN " + driver.OutboxChannel

// pgxStdlib is the package of pgx's database/sql driver.
const pgxStdlib = "github.com/jackc/pgx/v5/stdlib"

var _ driver.OutboxListener = engine{}

// OutboxListen takes a connection of the *sql.DB for itself, listens on
// driver.OutboxChannel and calls wake on each notification; the
// connection is discarded when it returns, whatever LISTEN left on it.
// database/sql has no way to wait for a notification: it needs the
// connection's own, which pgx's stdlib driver has (its *pgx.Conn's
// WaitForNotification, reached through sql.Conn.Raw by reflection, so
// that a program on lib/pq links no pgx). With lib/pq, another driver or
// through a pooler (PgBouncer: the server process the startup announced
// differs from the session's pg_backend_pid()) it returns
// driver.ErrNoRun, and the relay polls.
func (e engine) OutboxListen(ctx context.Context, ready, wake func()) (err error) {
	defer func() { err = canceled(ctx, err) }()
	if e.db == nil || e.pq {
		return driver.ErrNoRun
	}
	if _, pkg := driver.SQLDialect(e.db); pkg != pgxStdlib {
		return driver.ErrNoRun
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	// Discarded, not put back in the pool, with its LISTEN.
	defer func() {
		_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		_ = conn.Close()
	}()
	var pgxConn reflect.Value
	var startupPID uint64
	if err := conn.Raw(func(dc any) error {
		m := reflect.ValueOf(dc).MethodByName("Conn")
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			return driver.ErrNoRun
		}
		pgxConn = m.Call(nil)[0]
		pg := pgxConn.MethodByName("PgConn")
		if !pg.IsValid() {
			return driver.ErrNoRun
		}
		pid := pg.Call(nil)[0].MethodByName("PID")
		if !pid.IsValid() {
			return driver.ErrNoRun
		}
		startupPID = pid.Call(nil)[0].Uint()
		return nil
	}); err != nil {
		return err
	}
	wait := pgxConn.MethodByName("WaitForNotification")
	if !wait.IsValid() || wait.Type().NumOut() != 2 {
		return driver.ErrNoRun
	}
	pid, err := e.q.BackendPID(ctx, conn)
	if err != nil {
		return err
	}
	if uint64(uint32(pid)) != startupPID {
		return driver.ErrNoRun
	}
	if _, err := conn.ExecContext(ctx, sqlListen); err != nil {
		return err
	}
	ready()
	return conn.Raw(func(any) error {
		for {
			out := wait.Call([]reflect.Value{reflect.ValueOf(ctx)})
			if e := out[1]; !e.IsNil() {
				err, ok := e.Interface().(error)
				if !ok {
					return fmt.Errorf("pgsqldriver: WaitForNotification returned %v", e)
				}
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return err
			}
			wake()
		}
	})
}
