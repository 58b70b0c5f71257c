package mysqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// A purge deletes the oldest expired rows of a whole table: through vtgate
// on a sharded keyspace a DELETE ... ORDER BY ... LIMIT over every shard
// is refused (VT09015), and under transaction_mode=single one transaction
// cannot reach a second shard anyway. So through vtgate a purge in a
// transaction of the driver's own (dedupe's and token's Purge, inbox's
// Purge, `sqlonce purge`) deletes shard by shard: it
// lists the keyspace's shards (SHOW VITESS_SHARDS) and sends each the
// purge's statement with the table qualified by the shard's target
// (`keyspace:shard`.sqlonce_keys), which vtgate routes to that shard
// alone, in autocommit on the driver's handle, up to the batch's limit in
// all. Each statement commits on its own, whatever the transaction it was
// asked in does: an expired row is gone for every reader already, and a
// row is deleted once whoever deletes it. A purge in a caller's
// transaction (PurgeTx) cannot do that and is refused, unless the session
// is on one shard (a DSN whose database is keyspace:shard) or the keyspace
// has one. dedupe's PurgeEvery does not work through vtgate yet: its
// batch's transaction holds the lease's row, and the shard's DELETE, on
// another connection, can wait for that row's lock until it times out.

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

// vtgatePurge is Purge and TokenPurge through vtgate. sharded is false
// when the statement runs in tx as it would elsewhere: the session is on
// one shard, or the keyspace has one. Otherwise it deletes with del,
// shard by shard, on targets.
func (e engine) vtgatePurge(ctx context.Context, tx *sql.Tx, limit int, del func(ctx context.Context, on mysqldb.DBTX, limit int) (int64, error)) (n int64, sharded bool, err error) {
	targets, err := e.vtgateShards(ctx, tx)
	if err != nil || len(targets) < 2 {
		return 0, false, err
	}
	if own, _ := ctx.Value(ownTxKey{}).(*sql.Tx); own != tx || e.db == nil {
		return 0, true, errVtgatePurgeTx
	}
	for _, target := range targets {
		if int(n) >= limit {
			break
		}
		se := e
		se.schema = driver.NewMySQLTarget(target)
		m, err := del(ctx, se.on(driver.AutoTx), limit-int(n))
		n += m
		if err != nil {
			return n, true, fmt.Errorf("mysqldriver: purge shard %s: %w", target, err)
		}
	}
	return n, true, nil
}

// vtgateShards returns the targets (keyspace:shard) of the shards of the
// keyspace holding sqlonce's tables: the driver's database
// (WithDatabase), or the session's. None when the session is on a target
// already.
func (e engine) vtgateShards(ctx context.Context, tx *sql.Tx) ([]string, error) {
	ks := e.schema.Name()
	if ks == "" {
		if err := tx.QueryRowContext(ctx, sqlDatabase).Scan(&ks); err != nil {
			return nil, err
		}
	}
	if strings.ContainsAny(ks, ":@[/") {
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
	return targets, rows.Err()
}

func (e engine) Purge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return 0, err
	}
	del := func(ctx context.Context, on mysqldb.DBTX, limit int) (int64, error) {
		return e.q.KeyPurge(ctx, on, mysqldb.KeyPurgeParams{Now: myNow(now), Limit: int32(limit)})
	}
	if e.wsrep.vtgate {
		if n, sharded, err := e.vtgatePurge(ctx, tx, limit, del); sharded || err != nil {
			return n, err
		}
	}
	return del(ctx, e.on(tx), limit)
}

func (e engine) TokenPurge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return 0, err
	}
	del := func(ctx context.Context, on mysqldb.DBTX, limit int) (int64, error) {
		return e.q.TokenPurge(ctx, on, mysqldb.TokenPurgeParams{Now: myNow(now), Limit: int32(limit)})
	}
	if e.wsrep.vtgate {
		if n, sharded, err := e.vtgatePurge(ctx, tx, limit, del); sharded || err != nil {
			return n, err
		}
	}
	return del(ctx, e.on(tx), limit)
}
