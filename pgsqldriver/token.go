package pgsqldriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) TokenInsert(ctx context.Context, tx *sql.Tx, hash []byte, scope string, ttl time.Duration, now time.Time) (err error) {
	defer func() { err = canceled(ctx, err) }()
	return e.q.TokenInsert(ctx, e.on(tx), pgsqldb.TokenInsertParams{
		TokenHash: hash, Scope: scope, Now: pgNow(now), TtlUs: ttl.Microseconds(),
	})
}

func (e engine) TokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (_ driver.TokenConsumed, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.TokenConsume(ctx, e.on(tx), pgsqldb.TokenConsumeParams{Now: pgNow(now), TokenHash: hash, Scope: scope})
	if err != nil {
		return driver.TokenConsumed{}, err
	}
	if r.ConsumedNow {
		return driver.TokenConsumed{Consumed: true}, nil
	}
	return driver.TokenConsumed{Read: true, Found: r.Found, State: driver.TokenState{
		Scope: r.Scope, Consumed: r.Consumed, Expired: r.Expired,
	}}, nil
}

func (e engine) TokenGet(ctx context.Context, tx *sql.Tx, hash []byte, now time.Time) (_ driver.TokenState, _ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.TokenGet(ctx, e.on(tx), pgsqldb.TokenGetParams{Now: pgNow(now), TokenHash: hash})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.TokenState{}, false, nil
	}
	if err != nil {
		return driver.TokenState{}, false, err
	}
	return driver.TokenState{Scope: r.Scope, Consumed: r.Consumed, Expired: r.Expired}, true, nil
}

func (e engine) TokenPurge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (_ int64, err error) {
	defer func() { err = canceled(ctx, err) }()
	return e.q.TokenPurge(ctx, e.on(tx), pgsqldb.TokenPurgeParams{Now: pgNow(now), MaxRows: int32(limit)})
}
