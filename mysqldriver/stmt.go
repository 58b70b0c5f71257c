package mysqldriver

import (
	"context"
	"database/sql"
	"sync"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
)

// Without interpolateParams=true in the DSN, go-sql-driver/mysql runs every
// statement with arguments as a server-side prepare, an execute and a close:
// two round trips. sqlonce's statements are few and fixed, so a driver with
// a database handle prepares each once on it; a transaction then runs them
// through Tx.StmtContext, which database/sql prepares once per connection
// and reuses: one round trip per statement.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

// on returns what the generated queries run on for tx.
func (e engine) on(tx *sql.Tx) mysqldb.DBTX {
	if e.stmts == nil {
		return tx
	}
	return prepared{tx: tx, c: e.stmts}
}

// prepared runs the generated queries as statements prepared on the
// driver's handle. A transaction from another *sql.DB cannot use them
// (database/sql refuses before sending anything): it runs them unprepared.
type prepared struct {
	tx *sql.Tx
	c  *stmtCache
}

func (p prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	st, err := p.c.get(ctx, query)
	if err != nil {
		return nil
	}
	return p.tx.StmtContext(ctx, st)
}

// foreign reports database/sql's refusal of a statement prepared on
// another *sql.DB; it has no exported error to match.
func foreign(err error) bool {
	return err != nil && err.Error() == "sql: Tx.Stmt: statement from different database used"
}

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		res, err := st.ExecContext(ctx, args...)
		if !foreign(err) {
			return res, err
		}
	}
	return p.tx.ExecContext(ctx, query, args...)
}

func (p prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		if !foreign(err) {
			return rows, err
		}
	}
	return p.tx.QueryContext(ctx, query, args...)
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		// A Row's error shows only at Scan; probe the refusal first with
		// the cheap check database/sql makes before sending anything.
		if _, err := st.QueryContext(canceled, args...); !foreign(err) {
			return st.QueryRowContext(ctx, args...)
		}
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

// canceled makes the probe in QueryRowContext return before it sends
// anything.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (p prepared) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return p.tx.PrepareContext(ctx, query)
}
