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

func (e engine) TokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.TokenConsume(ctx, e.on(tx), mysqldb.TokenConsumeParams{Now: myNow(now), TokenHash: hash, Scope: []byte(scope)})
	return n == 1, err
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
