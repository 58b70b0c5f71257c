package roundtrips

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
)

// countingConnector opens connections of another database/sql driver and
// counts the statements run on them: every Exec and Query, BEGIN, COMMIT
// and ROLLBACK. It is how statements are counted on SQLite, which has no
// wire to watch.
type countingConnector struct {
	inner driver.Driver
	dsn   string
	n     atomic.Int64
}

func (c *countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, n: &c.n}, nil
}

func (c *countingConnector) Driver() driver.Driver { return c.inner }

type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countingConn) count(err error) error {
	if err != driver.ErrSkip {
		c.n.Add(1)
	}
	return err
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, n: c.n}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var tx driver.Tx
	var err error
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = c.Conn.Begin() //nolint:staticcheck // the fallback database/sql itself uses
	}
	c.n.Add(1)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, n: c.n}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	return r, c.count(err)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	return r, c.count(err)
}

func (c *countingConn) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countingStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.n.Add(1)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.n.Add(1)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

func (s *countingStmt) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

type countingTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t *countingTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t *countingTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }

// openCounting opens dsn with the driver registered as name, its statements
// counted.
func openCounting(name, dsn string) (*sql.DB, *countingConnector, error) {
	probe, err := sql.Open(name, dsn)
	if err != nil {
		return nil, nil, err
	}
	inner := probe.Driver()
	probe.Close()
	c := &countingConnector{inner: inner, dsn: dsn}
	return sql.OpenDB(c), c, nil
}
