package mysqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// A purge deletes the oldest expired rows of a whole table: through vtgate
// on a sharded keyspace a DELETE ... ORDER BY ... LIMIT over every shard
// is refused (VT09015), and under transaction_mode=single one transaction
// cannot reach a second shard anyway. So through vtgate a purge in a
// transaction of the driver's own (dedupe's Purge and PurgeEvery,
// token's Purge, inbox's Purge, `sqlonce purge`) deletes shard by shard: it
// lists the keyspace's shards (SHOW VITESS_SHARDS) and sends each the
// purge's statement with the table qualified by the shard's target
// (`keyspace:shard`.sqlonce_keys), which vtgate routes to that shard
// alone, in autocommit on the driver's handle, up to the batch's limit in
// all. Each statement commits on its own, whatever the transaction it was
// asked in does: an expired row is gone for every reader already, and a
// row is deleted once whoever deletes it. A purge in a caller's
// transaction (PurgeTx) cannot do that and is refused, unless the session
// is on one shard (a DSN whose database is keyspace:shard) or the keyspace
// has one.
//
// The keys' purge does not send KeyPurge's range DELETE to each shard:
// its scan on expires_at locks, past the expired rows, the first live
// one, and the transaction the purge was asked in may hold that row's
// lock. dedupe's PurgeEvery did, when each batch's transaction extended
// the purger's lease (a row of sqlonce_keys, never expired) before it
// purged and kept the row locked for the whole batch: the shard's DELETE,
// on another connection, waited for the batch that waited for it, until
// 1205 (innodb_lock_wait_timeout), every round. A batch now extends the
// lease last, but a caller's transaction may still hold such a row.
// Instead the oldest expired keys are listed over every
// shard with a read that locks nothing (KeyPurgeList; vtgate refuses a
// SELECT targeted at a shard, and merges a SELECT's ORDER BY ... LIMIT
// over them) and deleted one by one by their primary key if still expired
// (KeyPurgeOne, which vtgate routes by the scope): no statement touches a
// live row. It costs a round trip per key. The tokens' purge keeps the
// range DELETE per shard: no transaction of sqlonce's holds a token's row
// while it purges.

// ownTxKey marks the context InTx gives fn on vtgate, with the transaction
// it began: a purge asked in that transaction may run outside it.
type ownTxKey struct{}

// sqlShards lists the shards of every keyspace, as keyspace/shard.
const sqlShards = "SHOW VITESS_SHARDS"

// sqlDatabase is the session's keyspace, as vtgate reports it (a target
// such as keyspace:shard when the DSN names one).
const sqlDatabase = "SELECT DATABASE()"

// errVtgatePurgeTx refuses a purge in a caller's transaction through
// vtgate on a sharded keyspace.
var errVtgatePurgeTx = fmt.Errorf("%w: mysqldriver: a purge in a caller's transaction (PurgeTx) through vtgate on a sharded keyspace: "+
	"one transaction cannot reach every shard; use Purge (dedupe, token, inbox), which purges shard by shard, "+
	"or PurgeTx on a handle whose DSN names one shard (keyspace:shard) (docs/deployments.md, Vitess)", sqlonce.ErrInvalidArgument)

// vtgatePurgeShards, through vtgate, returns the targets of the
// keyspace's shards when a purge asked in tx must run outside it, shard
// by shard; none when the statement runs in tx as it would elsewhere: the
// session is on one shard, or the keyspace has one. A purge in a caller's
// transaction on a sharded keyspace is refused (errVtgatePurgeTx).
//
// Unlike a bounded claim (vtgateShards), a purge lists the shards anew at
// every call, and leaves the answer for the claims: the list decides which
// shards it deletes on, and one read once per handle would, after the
// keyspace was resharded, send a round's statements to a shard that is
// gone (every round failing) or skip a new one (its expired rows never
// purged), for the handle's life. One round trip per purge is little
// next to the purge's own statements, and a service that runs PurgeEvery
// then refreshes its claims' view of the keyspace at every round too.
func (e engine) vtgatePurgeShards(ctx context.Context, tx *sql.Tx) ([]string, error) {
	targets, err := e.listShards(ctx, tx)
	if err != nil || len(targets) < 2 {
		return nil, err
	}
	if own, _ := ctx.Value(ownTxKey{}).(*sql.Tx); own != tx || e.db == nil {
		return nil, errVtgatePurgeTx
	}
	return targets, nil
}

// purgeShards deletes up to limit rows with del, shard by shard, on
// targets, each statement in autocommit.
func (e engine) purgeShards(ctx context.Context, targets []string, limit int, del func(ctx context.Context, on mysqldb.DBTX, limit int) (int64, error)) (n int64, err error) {
	for _, target := range targets {
		if int(n) >= limit {
			break
		}
		se := e
		se.schema = driver.NewMySQLTarget(target)
		m, err := del(ctx, se.on(driver.AutoTx), limit-int(n))
		n += m
		if err != nil {
			return n, fmt.Errorf("mysqldriver: purge shard %s: %w", target, err)
		}
	}
	return n, nil
}

// vtgateShards returns the targets (keyspace:shard) of the shards of the
// keyspace holding sqlonce's tables: the driver's database
// (WithDatabase), or the session's. None when the session is on a target
// already. The answer is the handle's (vtShardCache): listed by the first
// call that needs it, in its transaction, and reused by every later call
// of every driver on the same *sql.DB with the same database, so that a
// bounded claim after the first costs no round trip for it.
func (e engine) vtgateShards(ctx context.Context, tx *sql.Tx) ([]string, error) {
	if targets, ok := e.shards.get(e.schema.Name()); ok {
		return targets, nil
	}
	return e.listShards(ctx, tx)
}

// listShards asks vtgate, in tx, for what vtgateShards answers (the
// session's database, unless the driver has one, and the shards), and
// leaves the answer in the handle's cache. Both statements vtgate
// answers itself, without reaching a shard or opening a shard's
// transaction. A failure is not kept: the next call asks again.
func (e engine) listShards(ctx context.Context, tx *sql.Tx) ([]string, error) {
	name := e.schema.Name()
	ks := name
	if ks == "" {
		if err := tx.QueryRowContext(ctx, sqlDatabase).Scan(&ks); err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(ks, ":@[/") {
		e.shards.put(name, nil)
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, sqlShards)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var targets []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		if shard, ok := strings.CutPrefix(s, ks+"/"); ok {
			targets = append(targets, ks+":"+shard)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	e.shards.put(name, targets)
	return targets, nil
}

// vtShardCache is what vtgateShards answers, by the driver's database
// (WithDatabase's name; "" for the session's), shared by the drivers on
// one *sql.DB, as wsrepCheck is.
//
// For the session's database it keeps the keyspace the first asking
// call's session was on: every connection of a pool starts on the DSN's
// database, and a handle whose connections are on different keyspaces
// (a USE on some of them) is not one sqlonce's unqualified statements
// could serve anyway; give such a program a driver WithDatabase, or a
// handle per keyspace. A keyspace resharded while the handle lives is
// seen at the next purge (vtgatePurgeShards lists the shards every time
// and refreshes the cache), or by a new handle. Until then a bounded
// claim is judged by the old count: a keyspace split from one shard into
// several lets it through, and under transaction_mode=single a key on a
// shard other than the first then fails as cross-shard (1317, nothing
// committed), as before the driver refused it.
type vtShardCache struct {
	mu sync.Mutex
	m  map[string][]string
}

func (c *vtShardCache) get(name string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	targets, ok := c.m[name]
	return targets, ok
}

func (c *vtShardCache) put(name string, targets []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]string{}
	}
	c.m[name] = targets
}

func (e engine) Purge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return 0, err
	}
	if e.wsrep.vtgate {
		targets, err := e.vtgatePurgeShards(ctx, tx)
		if err != nil {
			return 0, err
		}
		if targets != nil {
			return e.purgeKeysOneByOne(ctx, limit, now)
		}
	}
	return e.q.KeyPurge(ctx, e.on(tx), mysqldb.KeyPurgeParams{Now: myNow(now), Limit: int32(limit)})
}

// purgeKeysOneByOne deletes up to limit expired keys through vtgate, in
// autocommit on the driver's handle: it lists the oldest over every shard
// with a read that locks nothing (vtgate merges the shards' answers;
// it refuses a SELECT targeted at a shard), then deletes each by its
// primary key if it is still expired (vtgate routes the statement by the
// scope to its shard). Unlike KeyPurge's range DELETE it never locks a
// row that is not expired, such as the purger's lease, which
// PurgeEvery's batch holds in a transaction on another connection (see
// the top of this file).
func (e engine) purgeKeysOneByOne(ctx context.Context, limit int, now time.Time) (int64, error) {
	rows, err := e.q.KeyPurgeList(ctx, e.onDB(), mysqldb.KeyPurgeListParams{Now: myNow(now), Limit: int32(limit)})
	if err != nil {
		return 0, fmt.Errorf("mysqldriver: list expired keys: %w", err)
	}
	var n int64
	for _, r := range rows {
		m, err := e.q.KeyPurgeOne(ctx, e.onDB(), mysqldb.KeyPurgeOneParams{
			Namespace: r.Namespace, Scope: r.Scope, IdempotencyKey: r.IdempotencyKey, Now: myNow(now),
		})
		n += m
		if err != nil {
			return n, fmt.Errorf("mysqldriver: purge expired key: %w", err)
		}
	}
	return n, nil
}

func (e engine) TokenPurge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return 0, err
	}
	del := func(ctx context.Context, on mysqldb.DBTX, limit int) (int64, error) {
		return e.q.TokenPurge(ctx, on, mysqldb.TokenPurgeParams{Now: myNow(now), Limit: int32(limit)})
	}
	if e.wsrep.vtgate {
		targets, err := e.vtgatePurgeShards(ctx, tx)
		if err != nil {
			return 0, err
		}
		if targets != nil {
			return e.purgeShards(ctx, targets, limit, del)
		}
	}
	return del(ctx, e.on(tx), limit)
}
