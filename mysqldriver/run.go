package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.Runner[*sql.Tx] = engine{}

// runNonce is the token of a key Run records: a nonce, as for a claim in a
// transaction (see claim), below every lease's token, so that a lease
// holder's late Complete or Release never matches the row that took its
// place.
func runNonce() int64 { return 1 + rand.Int64N(1<<40) }

// Run is dedupe.Store.Run on MySQL/MariaDB (driver.SQLRun).
// go-sql-driver/mysql sends one statement per round trip, so Run spends as
// few as it can. By default it reads the key first, outside any
// transaction (a repeat ends there, with no transaction at all), then runs
// fn in a transaction and records the key, done, with fn's response in one
// INSERT before COMMIT: 5 round trips, a repeat 1. With
// dedupe.FavorFirstRuns it reads nothing first: 4 round trips; a repeat
// finds the key at the INSERT (a duplicate key, which rolls back that
// statement alone and leaves a shared lock on the row), reads it with a
// locking read and rolls fn's work back: 5. Nothing locks the key while
// fn runs: a concurrent run of the same key runs fn too, and its INSERT
// waits for the first's COMMIT. A Store that must not wait (WithNoWait,
// WithLockWait) needs the key held from the start: Run returns
// driver.ErrNoRun for it.
func (e engine) Run(ctx context.Context, p driver.RunParams, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (driver.RunResult, error) {
	if p.LockWait > 0 || p.NoRecord {
		// Both need the key claimed before fn: the generic path's Do in a
		// transaction of the Store's own, which is what this driver could
		// do too.
		return driver.RunResult{}, driver.ErrNoRun
	}
	if err := e.checkTx(ctx, nil); err != nil {
		return driver.RunResult{}, err
	}
	if e.wsrep.vtgate {
		// Through vtgate the key is claimed before fn, and its response
		// recorded by the claim's token after: a statement of fn's that
		// reaches a second shard makes vtgate roll the transaction back,
		// and if fn goes on, this path's INSERT after fn would commit the
		// key alone, in autocommit, while the token-checked write finds
		// the claim gone and fails.
		return driver.RunResult{}, driver.ErrNoRun
	}
	now := myNow(p.Now)
	ns, scope, key := int16(p.Namespace), []byte(p.Scope), []byte(p.Key.Key)
	return driver.SQLRun(ctx, p, driver.SQLRunSteps{
		DB:    e.db,
		Stale: sqlonce.ErrStaleRead,
		Lookup: func(ctx context.Context) (driver.KeyRow, bool, error) {
			row, err := e.q.KeyLookup(ctx, e.onDB(), mysqldb.KeyLookupParams{Now: now, Namespace: ns, Scope: scope, IdempotencyKey: key})
			if errors.Is(err, sql.ErrNoRows) {
				return driver.KeyRow{}, false, nil
			}
			return driver.KeyRow{Fingerprint: row.Fingerprint, Response: row.Response, Token: row.Token, Available: row.Available == 1, Leased: row.Locked == 1}, err == nil, err
		},
		Record: func(ctx context.Context, tx *sql.Tx, resp []byte) (bool, error) {
			token := runNonce()
			_, err := e.q.KeyInsert(ctx, e.on(tx), mysqldb.KeyInsertParams{
				Namespace: ns, Scope: scope, IdempotencyKey: key, Fingerprint: driver.NonNil(p.Fingerprint),
				Response: driver.NonNil(resp[:min(len(resp), responsePiece)]), State: driver.StateDone,
				Token: sql.NullInt64{Int64: token, Valid: true}, Now: now, TtlUs: p.TTL.Microseconds(),
			})
			if duplicate(err, "PRIMARY") {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			return true, e.appendRest(ctx, tx, ns, scope, key, token, resp)
		},
		Current: func(ctx context.Context, tx *sql.Tx) (driver.KeyRow, bool, error) {
			// The failed INSERT left a shared lock on the row; a locking read
			// sees it even where the snapshot (REPEATABLE READ) does not.
			row, err := e.q.KeyGetLocked(ctx, e.on(tx), mysqldb.KeyGetLockedParams{Now: now, Namespace: ns, Scope: scope, IdempotencyKey: key})
			if errors.Is(err, sql.ErrNoRows) {
				return driver.KeyRow{}, false, nil
			}
			return driver.KeyRow{Fingerprint: row.Fingerprint, Response: row.Response, Token: row.Token, Available: row.Available == 1, Leased: row.Locked == 1}, err == nil, err
		},
		Replace: func(ctx context.Context, tx *sql.Tx, old int64, resp []byte) (bool, error) {
			token := runNonce()
			n, err := e.q.KeyRunReplace(ctx, e.on(tx), mysqldb.KeyRunReplaceParams{
				Fingerprint: driver.NonNil(p.Fingerprint), Response: driver.NonNil(resp[:min(len(resp), responsePiece)]),
				NewToken: token, Now: now, TtlUs: p.TTL.Microseconds(),
				Namespace: ns, Scope: scope, IdempotencyKey: key, Token: old,
			})
			if err != nil || n != 1 {
				return false, err
			}
			return true, e.appendRest(ctx, tx, ns, scope, key, token, resp)
		},
	}, fn)
}
