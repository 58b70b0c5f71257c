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
// wsrepCheck asks the server, once per driver, whether it is a Galera node
// whose sessions read without that wait, and then refuses every call.
// The probe runs on the first call's transaction (or on the driver's
// handle, for calls that run their own): the session's setting is the one
// that matters, and every connection of a pool gets the DSN's. A probe
// that fails in a transaction fails the call, and is tried again by the
// next call: the failure may be the transaction's own, a deadlock or a
// Galera abort for another node's conflicting write, after which MySQL
// has rolled the transaction back and runs the call's statements in
// autocommit, each committing alone. On the handle a failed probe lets
// the call go on.
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
}

// sqlWsrepProbe answers on MySQL and on MariaDB built without wsrep too:
// no rows there.
const sqlWsrepProbe = "SHOW SESSION VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_sync_wait')"

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
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
	on, wait, err := probeWsrep(ctx, q)
	if err != nil {
		if _, inTx := q.(*sql.Tx); inTx {
			return fmt.Errorf("mysqldriver: read the session's wsrep_sync_wait: %w", err)
		}
		return nil
	}
	if on && wait&1 == 0 {
		c.err = fmt.Errorf("%w: mysqldriver: the server is a Galera node (wsrep_on=ON) and the session has wsrep_sync_wait=%d: "+
			"a read may miss a row another node has just committed, and a lease would look lost or a token unknown; "+
			"add wsrep_sync_wait=1 to the DSN (go-sql-driver/mysql sets it on every connection)", sqlonce.ErrInvalidArgument, wait)
	}
	c.inTx = on && wait&2 == 0
	c.done.Store(true)
	return c.err
}

// probeWsrep reads the session's wsrep_on and wsrep_sync_wait.
func probeWsrep(ctx context.Context, q querier) (on bool, wait int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := q.QueryContext(ctx, sqlWsrepProbe)
	if err != nil {
		return false, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return false, 0, err
		}
		switch strings.ToLower(name) {
		case "wsrep_on":
			on = strings.EqualFold(value, "ON") || value == "1"
		case "wsrep_sync_wait":
			wait, _ = strconv.Atoi(value)
		}
	}
	return on, wait, rows.Err()
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
