package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) TokenInsert(ctx context.Context, tx *sql.Tx, hash []byte, scope string, ttl time.Duration, now time.Time) error {
	if err := e.checkTx(ctx, tx); err != nil {
		return err
	}
	return e.q.TokenInsert(ctx, e.on(tx), mysqldb.TokenInsertParams{
		TokenHash: hash, Scope: []byte(scope), Now: myNow(now), TtlUs: ttl.Microseconds(),
	})
}

func (e engine) TokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (driver.TokenConsumed, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return driver.TokenConsumed{}, err
	}
	if e.wsrep.vtgate {
		return e.vtgateTokenConsume(ctx, tx, hash, scope, now)
	}
	res, err := e.q.TokenConsumeRead(ctx, e.on(tx), mysqldb.TokenConsumeReadParams{Now: myNow(now), TokenHash: hash, Scope: []byte(scope)})
	if err != nil {
		return driver.TokenConsumed{}, err
	}
	// The WHERE is true only for the row it consumes, so the rows found
	// and the rows changed agree (with or without clientFoundRows).
	n, err := res.RowsAffected()
	if err != nil {
		return driver.TokenConsumed{}, err
	}
	if n == 1 {
		return driver.TokenConsumed{Consumed: true}, nil
	}
	return tokenRead(res, scope), nil
}

// vtgateTokenConsume is TokenConsume through vtgate: the conditional
// UPDATE alone, as vtgate plans it on the scope's shard (vtgate refuses
// TokenConsumeRead's LAST_INSERT_ID(expr)), then, when it changed nothing,
// the reason read on the same shard, by the hash and the scope
// (TokenGetInScope). A repeat holds the token's row lock from the UPDATE
// until its transaction ends: a read by the hash alone (TokenGet) goes to
// every shard, and waited for a transaction slot on another shard whose
// transactions waited for locks held here, each shard's repeats stalling
// the other's (32 racers on 8 tokens over 2 shards). Only a token with no
// row of the scope (unknown, or another scope's) is left to TokenGet,
// after an UPDATE that locked no row.
func (e engine) vtgateTokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (driver.TokenConsumed, error) {
	n, err := e.q.TokenConsume(ctx, e.on(tx), mysqldb.TokenConsumeParams{Now: myNow(now), TokenHash: hash, Scope: []byte(scope)})
	if err != nil || n == 1 {
		return driver.TokenConsumed{Consumed: n == 1}, err
	}
	r, err := e.q.TokenGetInScope(ctx, e.on(tx), mysqldb.TokenGetInScopeParams{Now: myNow(now), TokenHash: hash, Scope: []byte(scope)})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.TokenConsumed{}, nil
	}
	if err != nil {
		return driver.TokenConsumed{}, err
	}
	return driver.TokenConsumed{Read: true, Found: true, State: driver.TokenState{
		Scope: scope, Consumed: r.Consumed == 1, Expired: r.Expired == 1,
	}}, nil
}

// tokenRead decodes what TokenConsumeRead's LAST_INSERT_ID says of a token
// of the scope it did not consume: 2 expired, 4 consumed, 6 both. Anything
// else (0: no row of the scope) leaves the reason to TokenGet.
func tokenRead(res sql.Result, scope string) driver.TokenConsumed {
	code, err := res.LastInsertId()
	if err != nil || (code != 2 && code != 4 && code != 6) {
		return driver.TokenConsumed{}
	}
	return driver.TokenConsumed{Read: true, Found: true, State: driver.TokenState{
		Scope: scope, Expired: code&2 != 0, Consumed: code&4 != 0,
	}}
}

func (e engine) TokenGet(ctx context.Context, tx *sql.Tx, hash []byte, now time.Time) (driver.TokenState, bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return driver.TokenState{}, false, err
	}
	r, err := e.q.TokenGet(ctx, e.on(tx), mysqldb.TokenGetParams{Now: myNow(now), TokenHash: hash})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.TokenState{}, false, nil
	}
	if err != nil {
		return driver.TokenState{}, false, err
	}
	return driver.TokenState{Scope: string(r.Scope), Consumed: r.Consumed == 1, Expired: r.Expired == 1}, true, nil
}
