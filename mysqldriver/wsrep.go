package mysqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// A Galera node (MariaDB Galera Cluster, Percona XtraDB Cluster) commits a
// transaction once every node has certified it, but applies it on the
// other nodes a little later: with wsrep_sync_wait=0, the default, a
// session on node B may not yet see a row a session on node A has just
// committed. sqlonce reads what it wrote before in another transaction (a
// lease's row at Complete, a token at Consume, a recorded key at a
// repeat), so on such a session a lease would look lost and a token
// unknown, for good. wsrep_sync_wait=1 makes every read and BEGIN wait
// until the node has applied what the cluster committed before it.
//
// A Galera node also loses the deadlock error of a transaction that
// another node's write aborts (a brute-force abort) while the session is
// preparing a statement (COM_STMT_PREPARE): the prepare answers success,
// MariaDB has rolled the transaction back, and every statement the client
// sends after it runs outside any transaction, each committing on its own,
// up to a COMMIT that commits nothing and succeeds. A claim then commits
// without its work, or the work without its claim. Measured on MariaDB
// 10.11 with Galera 4 (tests/galera TestPrepareLosesAbort): of the
// transactions aborted while preparing, 6 to 17% in three runs went on
// this way; of those aborted during a statement sent as text, none. So on
// a Galera node nothing may be prepared on the server inside a
// transaction: sqlonce's statements run unprepared there, and
// go-sql-driver/mysql sends a statement with arguments as text only with
// interpolateParams=true (without it, it prepares, executes and closes
// each one).
//
// wsrepCheck asks the server, once per *sql.DB (once per driver built with
// nil), whether it is a Galera node whose sessions read without that wait
// or prepare statements with arguments (or report no count of prepares, so
// that it cannot tell), and then refuses every call. The probe runs on the
// first call's transaction (or on the driver's handle, for calls that run
// their own): the session's setting is the one that matters, and every
// connection of a pool gets the DSN's. A probe that fails in a transaction
// fails the call, and is tried again by the next call: the failure may be
// the transaction's own, a deadlock or a Galera abort for another node's
// conflicting write, after which MySQL has rolled the transaction back and
// runs the call's statements in autocommit, each committing alone. On the
// handle a failed probe lets the call go on.
type wsrepCheck struct {
	mu   sync.Mutex
	done atomic.Bool
	err  error // set before done
	// inTx (set before done): a Galera node whose UPDATE and DELETE do not
	// wait either (wsrep_sync_wait without bit 2). BEGIN waits, so
	// statements that must see what another node committed run in a
	// transaction there, never in autocommit: a lease's Complete on node
	// B right after its Claim on node A would miss the row.
	inTx bool
	// galera (set before done): a Galera node, where sqlonce prepares
	// nothing (see stmtCache).
	galera bool
	// vtgate (set before done): Vitess's vtgate, whose session must keep a
	// transaction on one shard or commit it atomically (see vtgateErr).
	vtgate bool
}

// sqlWsrepProbe answers on MySQL and on MariaDB built without wsrep too:
// no wsrep rows there.
const sqlWsrepProbe = "SHOW SESSION VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_sync_wait')"

// sqlVersion is the server's version, which vtgate answers itself
// without reaching a shard.
const sqlVersion = "SELECT @@version"

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// errOn returns the refusal for q's session, probing it the first time.
func (c *wsrepCheck) errOn(ctx context.Context, q querier) error {
	if c.done.Load() {
		return c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return c.err
	}
	_, inTx := q.(*sql.Tx)
	if err := c.probe(ctx, q); err != nil {
		if inTx {
			return fmt.Errorf("mysqldriver: probe the session for Galera: %w", err)
		}
		return nil
	}
	c.done.Store(true)
	return c.err
}

// probe sets c's fields (all but done) from q's session: wsrep_on and
// wsrep_sync_wait and, on a Galera node that reads with the wait, whether
// the client prepares a statement with arguments on the server. q is a
// transaction, or the driver's handle, on one connection of which the
// probe then runs.
func (c *wsrepCheck) probe(ctx context.Context, q querier) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if db, ok := q.(*sql.DB); ok {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		q = conn
	}
	// The version first, which vtgate answers itself: its SHOW
	// VARIABLES goes to a shard of its choosing, and in a transaction
	// that had not reached a shard yet it opened one there, so that the
	// key's claim on the other shard met the cross-shard refusal (1317)
	// now and then. One round trip more, at the first call, elsewhere.
	var version string
	if err := q.QueryRowContext(ctx, sqlVersion).Scan(&version); err != nil {
		return err
	}
	if isVtgate(version) {
		c.vtgate, c.inTx, c.galera = true, false, false
		var err error
		c.err, err = vtgateErr(ctx, q)
		return err
	}
	vars, err := showRows(ctx, q, sqlWsrepProbe)
	if err != nil {
		return err
	}
	on := strings.EqualFold(vars["wsrep_on"], "ON") || vars["wsrep_on"] == "1"
	wait, _ := strconv.Atoi(vars["wsrep_sync_wait"])
	c.inTx, c.galera, c.err = on && wait&2 == 0, on, nil
	switch {
	case !on:
		return nil
	case wait&1 == 0:
		c.err = fmt.Errorf("%w: mysqldriver: the server is a Galera node (wsrep_on=ON) and the session has wsrep_sync_wait=%d: "+
			"a read may miss a row another node has just committed, and a lease would look lost or a token unknown; "+
			"add wsrep_sync_wait=1 to the DSN (go-sql-driver/mysql sets it on every connection)", sqlonce.ErrInvalidArgument, wait)
		return nil
	}
	prepares, known, err := preparesArgs(ctx, q)
	switch {
	case err != nil:
		return err
	case !known:
		c.err = fmt.Errorf("%w: mysqldriver: the server is a Galera node (wsrep_on=ON) and the session reports no Com_stmt_prepare, "+
			"so the driver cannot tell that go-sql-driver/mysql sends statements as text (interpolateParams=true): "+
			"a transaction that another node's write aborts while it prepares a statement loses its deadlock error", sqlonce.ErrInvalidArgument)
	case prepares:
		c.err = fmt.Errorf("%w: mysqldriver: the server is a Galera node (wsrep_on=ON) and go-sql-driver/mysql prepares every statement "+
			"with arguments on the server: a transaction that another node's write aborts while it prepares one loses its deadlock error, "+
			"and the statements after it commit one by one, outside the transaction; add interpolateParams=true to the DSN", sqlonce.ErrInvalidArgument)
	}
	return nil
}

// preparesArgs reports whether the client prepares a statement with
// arguments on the server: the session's count of prepares before and
// after one. known is false when the session reports no count.
func preparesArgs(ctx context.Context, q querier) (prepares, known bool, err error) {
	before, err := showRows(ctx, q, sqlPrepareCount)
	if err != nil {
		return false, false, err
	}
	var one int
	if err := q.QueryRowContext(ctx, "SELECT ?", 1).Scan(&one); err != nil {
		return false, false, err
	}
	after, err := showRows(ctx, q, sqlPrepareCount)
	if err != nil {
		return false, false, err
	}
	b, okB := before["com_stmt_prepare"]
	a, okA := after["com_stmt_prepare"]
	return a != b, okA && okB, nil
}

// sqlPrepareCount reads the session's count of COM_STMT_PREPARE.
const sqlPrepareCount = "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'"

// showRows runs a SHOW of name and value rows (variables, status), and
// returns the values by lower-case name.
func showRows(ctx context.Context, q querier, query string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		vars[strings.ToLower(name)] = value
	}
	return vars, rows.Err()
}

// checkTx is the check on tx's session, or on the driver's handle when tx
// is nil.
func (e engine) checkTx(ctx context.Context, tx *sql.Tx) error {
	if e.wsrep.done.Load() {
		return e.wsrep.err
	}
	switch {
	case tx != nil && tx != driver.AutoTx:
		return e.wsrep.errOn(ctx, tx)
	case e.db != nil:
		return e.wsrep.errOn(ctx, e.db)
	}
	return nil
}
