package mysqldriver

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Without interpolateParams=true in the DSN, go-sql-driver/mysql runs every
// statement with arguments as a server-side prepare, an execute and a close:
// two round trips. sqlonce's statements are few and fixed, so a driver with
// a database handle prepares each once on it; a transaction then runs them
// through Tx.StmtContext, which database/sql prepares once per connection
// and reuses: one round trip per statement. Not on a Galera node, where a
// prepare inside a transaction may lose the transaction's abort (see
// wsrepCheck): there the DSN must set interpolateParams=true, and the
// statements run as text, one round trip each as well.
//
// Every driver built on one *sql.DB shares one cache (cacheFor): the server
// holds each statement once per connection of the pool, however many
// drivers a program builds, so the server-wide max_prepared_stmt_count is
// never spent by a service that builds a driver per request.
type stmtCache struct {
	db *sql.DB
	*stmts
	// wsrep is the Galera check of db's sessions, asked once for every
	// driver on db: a service that builds a driver per request pays for
	// the probe once.
	wsrep *wsrepCheck
	// batch: the batch claim's shapes db's server refused (batchjson.go).
	batch *batchShape
	// shards: through vtgate, the keyspace's shards (vtShardCache).
	shards *vtShardCache
}

// stmts is the part of a stmtCache that its cleanup closes: it must not
// refer to the stmtCache itself, or the cache would never be collected.
type stmts struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
	// preparing and retryAt keep callers from queueing for a connection:
	// while one goroutine prepares a statement, or for a while after a
	// prepare gave up, callers run it unprepared.
	preparing map[string]bool
	retryAt   map[string]time.Time
}

// close closes every statement, on every connection that prepared it.
func (s *stmts) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q, st := range s.m {
		_ = st.Close()
		delete(s.m, q)
	}
}

// caches maps each *sql.DB to the one stmtCache its drivers share. Both
// sides are weak, so that the registry keeps neither alive: a cache lives
// while a driver refers to it, and a *sql.DB, closed or not, can be
// collected once neither the program nor a driver refers to it (each
// prepared statement refers to its *sql.DB, so a strong cache here would
// keep every handle ever used alive). When the last driver on a handle is
// collected, a cleanup closes the cache's statements (the server frees
// them on every connection) and drops the entry; a driver built on the
// handle later prepares them anew.
var caches = struct {
	mu sync.Mutex
	m  map[weak.Pointer[sql.DB]]weak.Pointer[stmtCache]
}{m: map[weak.Pointer[sql.DB]]weak.Pointer[stmtCache]{}}

// cacheFor returns the statement cache shared by the drivers built on db.
func cacheFor(db *sql.DB) *stmtCache {
	k := weak.Make(db)
	caches.mu.Lock()
	defer caches.mu.Unlock()
	if c := caches.m[k].Value(); c != nil {
		return c
	}
	c := &stmtCache{db: db, stmts: &stmts{}, wsrep: &wsrepCheck{}, batch: &batchShape{}, shards: &vtShardCache{}}
	self := weak.Make(c)
	caches.m[k] = self
	runtime.AddCleanup(c, func(s *stmts) {
		caches.mu.Lock()
		if caches.m[k] == self {
			delete(caches.m, k)
		}
		caches.mu.Unlock()
		s.close()
	}, c.stmts)
	return c
}

// prepareWait bounds the wait for a pool connection to prepare on. A pool
// whose every connection sits in a transaction that is itself about to
// run the statement has none to give: waiting would deadlock them all.
const (
	prepareWait  = 50 * time.Millisecond
	prepareRetry = time.Second
)

// get returns the statement prepared on the driver's handle, or nil: then
// the caller runs the query unprepared.
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	if st, ok := c.m[query]; ok {
		c.mu.Unlock()
		return st
	}
	if c.preparing[query] || time.Now().Before(c.retryAt[query]) {
		c.mu.Unlock()
		return nil
	}
	if c.preparing == nil {
		c.m, c.preparing, c.retryAt = map[string]*sql.Stmt{}, map[string]bool{}, map[string]time.Time{}
	}
	c.preparing[query] = true
	c.mu.Unlock()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prepareWait)
	st, err := c.db.PrepareContext(pctx, query)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.preparing, query)
	if err != nil {
		c.retryAt[query] = time.Now().Add(prepareRetry)
		return nil
	}
	c.m[query] = st
	return st
}

// on returns what the generated queries run on for tx, qualified by the
// driver's database (WithDatabase).
func (e engine) on(tx *sql.Tx) mysqldb.DBTX { return e.schema.SQLOn(e.onTx(tx)) }

func (e engine) onTx(tx *sql.Tx) mysqldb.DBTX {
	if tx == driver.AutoTx { // Autocommit's: the handle
		return e.onHandle()
	}
	// A nil tx must never fall through to the handle's statements, which
	// would commit at once; the strategies refuse one before calling.
	if e.stmts == nil || tx == nil || !e.prepares() {
		return tx
	}
	return prepared{on: tx, tx: tx, c: e.stmts}
}

// prepares reports whether sqlonce's statements run prepared: once the
// server is known not to be a Galera node, which loses the deadlock error
// of a transaction aborted while it prepares one (see wsrepCheck). Until
// the first probe has answered, and on Galera, they run as the DSN sends
// them (as text, with interpolateParams=true).
func (e engine) prepares() bool {
	return e.wsrep.done.Load() && !e.wsrep.galera
}

// onDB returns what the generated queries run on outside a transaction:
// the driver's handle, with its prepared statements, qualified by the
// driver's database. e.db must not be nil.
func (e engine) onDB() mysqldb.DBTX { return e.schema.SQLOn(e.onHandle()) }

func (e engine) onHandle() mysqldb.DBTX {
	if e.stmts == nil || !e.prepares() {
		return e.db
	}
	return prepared{on: e.db, c: e.stmts}
}

// prepared runs the generated queries as statements prepared on the
// driver's handle: in tx, or on the handle itself when tx is nil. A
// transaction from another *sql.DB cannot use them (database/sql refuses
// before sending anything): it runs them unprepared.
type prepared struct {
	on mysqldb.DBTX // tx, or the driver's *sql.DB
	tx *sql.Tx
	c  *stmtCache
}

func (p prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	st := p.c.get(ctx, query)
	if st == nil || p.tx == nil {
		return st
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
	return p.on.ExecContext(ctx, query, args...)
}

func (p prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		if !foreign(err) {
			return rows, err
		}
	}
	return p.on.QueryContext(ctx, query, args...)
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		if p.tx == nil {
			return st.QueryRowContext(ctx, args...) // prepared on this very handle
		}
		// A Row's error shows only at Scan; probe the refusal first with
		// the cheap check database/sql makes before sending anything.
		if _, err := st.QueryContext(canceled, args...); !foreign(err) {
			return st.QueryRowContext(ctx, args...)
		}
	}
	return p.on.QueryRowContext(ctx, query, args...)
}

// canceled makes the probe in QueryRowContext return before it sends
// anything.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (p prepared) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return p.on.PrepareContext(ctx, query)
}
