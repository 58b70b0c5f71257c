package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/sqlitedb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) TokenInsert(ctx context.Context, tx *sql.Tx, hash []byte, scope string, ttl time.Duration, now time.Time) error {
	return e.q.TokenInsert(ctx, e.on(tx), sqlitedb.TokenInsertParams{
		TokenHash: hash, Scope: scope, Now: liteNow(now), TtlUs: ttl.Microseconds(),
	})
}

// TokenConsume is the conditional UPDATE alone: SQLite's UPDATE writes a
// row it matches even with the values it holds, and RETURNING returns
// only rows it changed, so no one statement reads a repeat's token
// without writing it; TokenGet tells why it changed nothing. A statement
// here is a call into the library, not a round trip.
func (e engine) TokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (driver.TokenConsumed, error) {
	n, err := e.q.TokenConsume(ctx, e.on(tx), sqlitedb.TokenConsumeParams{Now: liteNow(now), TokenHash: hash, Scope: scope})
	return driver.TokenConsumed{Consumed: n == 1}, err
}

func (e engine) TokenGet(ctx context.Context, tx *sql.Tx, hash []byte, now time.Time) (driver.TokenState, bool, error) {
	r, err := e.q.TokenGet(ctx, e.on(tx), sqlitedb.TokenGetParams{Now: liteNow(now), TokenHash: hash})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.TokenState{}, false, nil
	}
	if err != nil {
		return driver.TokenState{}, false, err
	}
	return driver.TokenState{Scope: r.Scope, Consumed: r.Consumed == 1, Expired: r.Expired == 1}, true, nil
}

func (e engine) TokenPurge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	return e.q.TokenPurge(ctx, e.on(tx), sqlitedb.TokenPurgeParams{Now: liteNow(now), MaxRows: int64(limit)})
}
