package driver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DialectCheck decides whether the database behind a driver built on
// database/sql speaks the driver's dialect, when the handle's database/sql
// driver is one SQLDialect does not know (a wrapper such as otelsql):
// once, at the first call, by a probe on that call's transaction or
// handle. (A known one is judged at New: CheckSQLDialect.) A mismatch is
// an error matching sqlonce.ErrInvalidArgument from every call, before any
// of sqlonce's statements runs: never a syntax error, and never a unique
// violation of one database misread by another's rules.
type DialectCheck struct {
	want    string // the driver's dialect
	name    string // the driver's package, for messages
	invalid error  // sqlonce.ErrInvalidArgument, which this package cannot import

	mu   sync.Mutex
	done atomic.Bool
	err  error // set before done
}

// CheckSQLDialect checks db for a driver named name (its package) of
// dialect want, at the driver's New: a nil db, or one whose database/sql
// driver is known to speak another dialect, is an error wrapping invalid
// (sqlonce.ErrInvalidArgument) that names what to use instead (see
// WrongHandle). For a db of a driver it does not know it returns the
// check its calls make first; nil when db is known to speak want.
func CheckSQLDialect(db *sql.DB, want, name string, invalid error) (*DialectCheck, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: %s: nil *sql.DB", invalid, name)
	}
	if err := WrongHandle(db, want, name, invalid); err != nil {
		return nil, err
	}
	if got, _ := SQLDialect(db); got == want {
		return nil, nil
	}
	return &DialectCheck{want: want, name: name, invalid: invalid}, nil
}

// querier is a *sql.Tx or a *sql.DB.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Err returns the mismatch error, probing q the first time it can decide.
// A probe that cannot decide (a broken connection, an aborted transaction)
// lets the call go on and is tried again by the next call.
func (c *DialectCheck) Err(ctx context.Context, q querier) error {
	if c == nil {
		return nil
	}
	if c.done.Load() {
		return c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return c.err
	}
	got, ok := probeDialect(ctx, q)
	if !ok {
		return nil
	}
	if got != "" && got != c.want {
		c.err = fmt.Errorf("%w: %s was given a transaction of %s, not %s; use %s", c.invalid, c.name, DialectName(got), DialectName(c.want), DriverFor(got))
	}
	c.done.Store(true)
	return c.err
}

// probeDialect asks the server what it is: version() answers on
// PostgreSQL ("PostgreSQL 15.8 ...") and MySQL/MariaDB ("10.11.6-MariaDB",
// "8.0.36"), and fails on SQLite, which has sqlite_version() instead.
// Neither statement can abort a PostgreSQL transaction: the second runs
// only where the first failed, which PostgreSQL's never does. ok is false
// when neither answered; got is "" for a server it does not know.
func probeDialect(ctx context.Context, q querier) (got string, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var v string
	if err := q.QueryRowContext(ctx, "SELECT version()").Scan(&v); err == nil {
		switch {
		case strings.HasPrefix(v, "PostgreSQL "):
			return Postgres, true
		case strings.Contains(v, "MariaDB"), len(v) > 0 && v[0] >= '0' && v[0] <= '9':
			return MySQL, true
		}
		return "", true
	}
	if err := q.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err == nil {
		return SQLite, true
	}
	return "", false
}
