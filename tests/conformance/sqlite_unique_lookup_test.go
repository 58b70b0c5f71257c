package conformance

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/unique"
)

// TestSQLiteUniqueLookupCancelled: on SQLite, unique.Insert judges a
// duplicate on a named index by looking the index's columns up in the
// transaction. When the context ended during that lookup, Insert used to
// ignore the lookup's error and return the raw "UNIQUE constraint failed",
// which is neither AlreadyDone nor the context's error. A connection hook
// cancels the context exactly when the lookup starts, so the case is
// deterministic.
func TestSQLiteUniqueLookupCancelled(t *testing.T) {
	ctx := ctxT(t)
	dsn := modernc.DSN(testdb.EmptySQLite(t))
	probe, err := sql.Open(modernc.DriverName, dsn)
	must(t, err)
	inner := probe.Driver()
	must(t, migrations.Up(ctx, probe, migrations.SQLite))
	must(t, bizdb.Migrate(ctx, probe, "sqlite"))
	_, err = probe.ExecContext(ctx, "INSERT INTO orders (code, customer, amount) VALUES ('c-1', 'c-1', 1)")
	must(t, err)
	must(t, probe.Close())

	hook := &cancelOnLookup{inner: inner, dsn: dsn}
	db := sql.OpenDB(hook)
	t.Cleanup(func() { db.Close() })
	d, err := sqlitedriver.New(db)
	must(t, err)
	ins, err := unique.New(d)
	must(t, err)

	for range 20 {
		cctx, cancel := context.WithCancel(ctx)
		hook.cancel.Store(&cancel)
		tx, err := db.BeginTx(cctx, nil)
		must(t, err)
		res, err := ins.Insert(cctx, tx, "orders_code_key", func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (code, customer, amount) VALUES ('c-1', 'c-1', 1)")
			return err
		})
		_ = tx.Rollback()
		cancel()
		if !hook.fired.Swap(false) {
			t.Fatal("the lookup never ran: the case no longer measures what it says")
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("context cancelled during the index lookup: %v %v, want an error matching context.Canceled", res, err)
		}
	}
}

// cancelOnLookup opens connections of another database/sql driver and
// cancels the stored context when a query reads the schema, which only
// sqlitedriver's index lookup does.
type cancelOnLookup struct {
	inner  driver.Driver
	dsn    string
	cancel atomic.Pointer[context.CancelFunc]
	fired  atomic.Bool
}

func (c *cancelOnLookup) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &lookupConn{Conn: conn, hook: c}, nil
}

func (c *cancelOnLookup) Driver() driver.Driver { return c.inner }

type lookupConn struct {
	driver.Conn
	hook *cancelOnLookup
}

func (c *lookupConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *lookupConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *lookupConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(query, "sqlite_schema") {
		if cancel := c.hook.cancel.Load(); cancel != nil {
			(*cancel)()
			c.hook.fired.Store(true)
			// What a driver returns for a query its context ended under.
			return nil, ctx.Err()
		}
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}
