package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.Runner[*sql.Tx] = engine{}

// Run is dedupe.Store.Run on MySQL/MariaDB. go-sql-driver/mysql sends one
// statement per round trip, so Run spends as few as it can: it reads the
// key first, outside any transaction (a repeat ends there, with no
// transaction at all), then runs fn in a transaction and records the key,
// done, with fn's response in one INSERT before COMMIT. Nothing locks the
// key while fn runs: a concurrent run of the same key runs fn too, and the
// INSERT decides; the loser's INSERT waits for the winner's COMMIT, fails
// on the duplicate key, and rolls fn's work back (sqlonce.ErrStaleRead:
// Store.Run starts over and finds the key). A Store that must not wait
// (WithNoWait, WithLockWait) needs the key held from the start: Run
// returns driver.ErrNoRun for it.
func (e engine) Run(ctx context.Context, p driver.RunParams, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (driver.RunResult, error) {
	if e.db == nil {
		return driver.RunResult{}, sqlonce.ErrNoDB
	}
	if p.LockWait > 0 {
		return driver.RunResult{}, driver.ErrNoRun
	}
	if err := e.checkTx(ctx, nil); err != nil {
		return driver.RunResult{}, err
	}
	now := myNow(p.Now)
	ns, scope, key := int16(p.Namespace), []byte(p.Scope), []byte(p.Key.Key)
	row, err := e.q.KeyLookup(ctx, e.onDB(), mysqldb.KeyLookupParams{Now: now, Namespace: ns, Scope: scope, IdempotencyKey: key})
	found := err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return driver.RunResult{}, err
	}
	if found && row.Available == 0 {
		return driver.RunResult{Existing: driver.Existing{Fingerprint: row.Fingerprint, Response: row.Response, Leased: row.Locked == 1}}, nil
	}
	var res driver.RunResult
	err = driver.SQLInTx(ctx, e.db, func(ctx context.Context, tx *sql.Tx) error {
		resp, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		if found {
			// Expired, or a lapsed lease: delete the row read if it still
			// is. If it changed since (taken over, completed late by its
			// lease holder), the row fails the INSERT.
			if _, err := e.q.KeyRunDelete(ctx, e.on(tx), mysqldb.KeyRunDeleteParams{Namespace: ns, Scope: scope, IdempotencyKey: key, Token: row.Token, Now: now}); err != nil {
				return err
			}
		}
		// A nonce, as for a claim in a transaction (see claim).
		token := 1 + rand.Int64N(1<<40)
		err = e.q.KeyInsert(ctx, e.on(tx), mysqldb.KeyInsertParams{
			Namespace: ns, Scope: scope, IdempotencyKey: key, Fingerprint: driver.NonNil(p.Fingerprint),
			Response: driver.NonNil(resp[:min(len(resp), responsePiece)]), State: driver.StateDone,
			Token: sql.NullInt64{Int64: token, Valid: true}, Now: now, TtlUs: p.TTL.Microseconds(),
		})
		if duplicate(err, "PRIMARY") {
			return fmt.Errorf("%w: key %q in scope %q was recorded by another transaction: %w", sqlonce.ErrStaleRead, p.Key.Key, p.Scope, err)
		}
		if err != nil {
			return err
		}
		if err := e.appendRest(ctx, tx, ns, scope, key, token, resp); err != nil {
			return err
		}
		res = driver.RunResult{Won: true, Response: resp, Takeover: found}
		return nil
	})
	if err != nil {
		return driver.RunResult{}, err
	}
	return res, nil
}
