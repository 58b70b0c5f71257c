package pgsqldriver

import (
	"context"
	"database/sql"
	"errors"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.Runner[*sql.Tx] = engine{}

// readOnly begins the transaction of Run's read through lib/pq.
var readOnly = &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true}

// Run is dedupe.Store.Run through database/sql (driver.SQLRun), which
// sends one statement per round trip and cannot pipeline as pgxdriver's
// Run does. By default it reads the key first, outside any transaction (a
// repeat ends there), then runs fn in a READ COMMITTED transaction and
// records the key, done, with fn's response before COMMIT: 5 round trips,
// a repeat 1 (through lib/pq the read runs in a read-only transaction of
// its own, BEGIN and ROLLBACK around it: see isPQ). With dedupe.FavorFirstRuns it reads nothing first: 4 round
// trips; a repeat finds the key at the record (ON CONFLICT DO NOTHING
// inserts nothing and leaves the transaction usable), reads it and rolls
// fn's work back. Nothing holds the key while fn runs: a concurrent run of
// the same key runs fn too, and its record waits for the first's COMMIT. A
// Store that must not wait (WithNoWait, WithLockWait) needs the key held
// from the start: Run returns driver.ErrNoRun for it.
func (e engine) Run(ctx context.Context, p driver.RunParams, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (_ driver.RunResult, err error) {
	if p.LockWait > 0 || p.NoRecord {
		// Both need the key claimed before fn: the generic path's Do in a
		// transaction of the Store's own, which is what this driver could
		// do too.
		return driver.RunResult{}, driver.ErrNoRun
	}
	defer func() { err = canceled(ctx, err) }()
	get := pgsqldb.KeyGetParams{Now: pgNow(p.Now), Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key}
	read := func(ctx context.Context, q pgsqldb.DBTX) (driver.KeyRow, bool, error) {
		row, err := e.q.KeyGet(ctx, e.schema.SQLOn(q), get)
		if errors.Is(err, sql.ErrNoRows) {
			return driver.KeyRow{}, false, nil
		}
		return driver.KeyRow{Fingerprint: row.Fingerprint, Response: row.Response, Token: row.Token, Available: row.Available, Leased: row.Locked}, err == nil, err
	}
	return driver.SQLRun(ctx, p, driver.SQLRunSteps{
		DB:    e.db,
		Begin: readCommitted,
		Stale: sqlonce.ErrStaleRead,
		Lookup: func(ctx context.Context) (driver.KeyRow, bool, error) {
			if !e.pq {
				return read(ctx, e.db)
			}
			// lib/pq: in a transaction of its own (see isPQ).
			tx, err := e.db.BeginTx(ctx, readOnly)
			if err != nil {
				return driver.KeyRow{}, false, err
			}
			defer func() { _ = tx.Rollback() }()
			return read(ctx, tx)
		},
		Record: func(ctx context.Context, tx *sql.Tx, resp []byte) (bool, error) {
			n, err := e.q.KeyRunRecord(ctx, e.on(tx), pgsqldb.KeyRunRecordParams{
				Namespace: get.Namespace, Scope: get.Scope, IdempotencyKey: get.IdempotencyKey,
				Fingerprint: driver.NonNil(p.Fingerprint), Response: driver.NonNil(resp),
				Now: get.Now, TtlUs: p.TTL.Microseconds(),
			})
			return n == 1, err
		},
		// READ COMMITTED: a new statement sees the row committed last.
		Current: func(ctx context.Context, tx *sql.Tx) (driver.KeyRow, bool, error) { return read(ctx, tx) },
		Replace: func(ctx context.Context, tx *sql.Tx, token int64, resp []byte) (bool, error) {
			n, err := e.q.KeyRunReplace(ctx, e.on(tx), pgsqldb.KeyRunReplaceParams{
				Fingerprint: driver.NonNil(p.Fingerprint), Response: driver.NonNil(resp),
				Now: get.Now, TtlUs: p.TTL.Microseconds(),
				Namespace: get.Namespace, Scope: get.Scope, IdempotencyKey: get.IdempotencyKey, Token: token,
			})
			return n == 1, err
		},
	}, fn)
}
