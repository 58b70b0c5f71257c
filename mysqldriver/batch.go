package mysqldriver

import (
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.BatchClaimer[*sql.Tx] = engine{}

// ClaimBatch claims every key of the batch in one statement on MariaDB: an
// INSERT of them all, each new row named by one nonce, returning every
// key's row, so that the nonce tells the new rows from the existing ones.
// Where the server has no INSERT ... RETURNING (MySQL), a locking read of
// the rows follows the INSERT, unless the INSERT reports that no key
// existed (a batch of new messages, the common case).
func (e engine) ClaimBatch(ctx context.Context, tx *sql.Tx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return nil, err
	}
	if e.wsrep.vtgate || e.batch.first.Load() == shapePerKey {
		// vtgate cannot plan the batch's INSERT ... SELECT over a derived
		// table ("missing bind var"): every key is left undecided, and
		// claimed alone, on the scope's shard. So too in a session
		// pinned to a shard, once vtgate's parser refused a shape
		// (refusedBy).
		return make([]driver.BatchClaim, len(p.Keys)), nil
	}
	list, err := json.Marshal(p.Keys)
	if err != nil {
		return nil, err
	}
	now := myNow(p.Now)
	// Below any clock-based token, as a single in-transaction claim's.
	nonce := 1 + rand.Int64N(1<<40)
	params := mysqldb.KeyInsertBatchParams{
		Namespace: int16(p.Namespace), Scope: []byte(p.Scope), KeyList: string(list), Token: nonce, Now: now, TtlUs: p.TTL.Microseconds(),
	}
	if e.batch.first.Load() == shapeReturning {
		rows, ok, err := e.insertBatchReturning(ctx, tx, params)
		if err != nil {
			return nil, err
		}
		if ok {
			return batchClaims(p.Keys, rows, nonce), nil
		}
		if e.batch.first.Load() == shapePerKey {
			return make([]driver.BatchClaim, len(p.Keys)), nil
		}
	}
	allNew, err := e.insertBatch(ctx, tx, params, len(p.Keys))
	if err != nil {
		return nil, err
	}
	if allNew { // every row is the batch's: nothing to read
		won := make([]driver.BatchRow, len(p.Keys))
		for i, k := range p.Keys {
			won[i] = driver.BatchRow{Key: k, Won: true, Token: nonce}
		}
		return driver.BatchClaims(p.Keys, won), nil
	}
	rows, err := e.getBatch(ctx, tx, mysqldb.KeyGetBatchParams{Now: now, Namespace: int16(p.Namespace), Scope: []byte(p.Scope), KeyList: string(list)})
	if err != nil {
		return nil, err
	}
	return batchClaims(p.Keys, rows, nonce), nil
}

// batchClaims tells, among the rows of a batch's keys, those the batch
// inserted (its nonce) from those that existed.
func batchClaims(keys []string, rows []mysqldb.KeyGetBatchRow, nonce int64) []driver.BatchClaim {
	out := make([]driver.BatchRow, len(rows))
	for i, r := range rows {
		out[i] = driver.BatchRow{Key: string(r.IdempotencyKey), Won: r.Token == nonce, Token: nonce, Available: r.Available == 1,
			Existing: driver.Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.State == driver.StateLeased}}
	}
	return driver.BatchClaims(keys, out)
}
