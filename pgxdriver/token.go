package pgxdriver

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) TokenInsert(ctx context.Context, tx pgx.Tx, hash []byte, scope string, ttl time.Duration, now time.Time) error {
	return e.q.TokenInsert(ctx, e.on(tx), pgdb.TokenInsertParams{
		TokenHash: hash, Scope: scope, Now: pgNow(now), TtlUs: ttl.Microseconds(),
	})
}

func (e engine) TokenConsume(ctx context.Context, tx pgx.Tx, hash []byte, scope string, now time.Time) (driver.TokenConsumed, error) {
	r, err := e.q.TokenConsume(ctx, e.on(tx), pgdb.TokenConsumeParams{Now: pgNow(now), TokenHash: hash, Scope: scope})
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

func (e engine) TokenGet(ctx context.Context, tx pgx.Tx, hash []byte, now time.Time) (driver.TokenState, bool, error) {
	r, err := e.q.TokenGet(ctx, e.on(tx), pgdb.TokenGetParams{Now: pgNow(now), TokenHash: hash})
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.TokenState{}, false, nil
	}
	if err != nil {
		return driver.TokenState{}, false, err
	}
	return driver.TokenState{Scope: r.Scope, Consumed: r.Consumed, Expired: r.Expired}, true, nil
}

func (e engine) TokenPurge(ctx context.Context, tx pgx.Tx, limit int, now time.Time) (int64, error) {
	return e.q.TokenPurge(ctx, e.on(tx), pgdb.TokenPurgeParams{Now: pgNow(now), MaxRows: int32(limit)})
}
