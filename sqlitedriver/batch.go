package sqlitedriver

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/sqlitedb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.BatchClaimer[*sql.Tx] = engine{}

// ClaimBatch claims every key of the batch in one statement, and reads
// the keys it could not take in a second one, only when there are any: an
// INSERT of them all that takes over expired keys and lapsed leases as a
// single claim does, returning the keys it won, then a read of the others.
// A key that expired or lapsed between the two statements (SQLite reads
// its clock per statement) is left undecided: the caller claims it alone.
func (e engine) ClaimBatch(ctx context.Context, tx *sql.Tx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	list, err := json.Marshal(p.Keys)
	if err != nil {
		return nil, err
	}
	now := liteNow(p.Now)
	won, err := e.q.KeyClaimBatch(ctx, tx, sqlitedb.KeyClaimBatchParams{
		Namespace: int64(p.Namespace), Scope: p.Scope, Now: now, TtlUs: p.TTL.Microseconds(), KeyList: string(list),
	})
	if err != nil {
		return nil, err
	}
	rows := make([]driver.BatchRow, 0, len(p.Keys))
	claimed := make(map[string]bool, len(won))
	for _, r := range won {
		rows = append(rows, driver.BatchRow{Key: r.IdempotencyKey, Won: true, Token: r.Token})
		claimed[r.IdempotencyKey] = true
	}
	if len(won) == len(p.Keys) {
		return driver.BatchClaims(p.Keys, rows), nil
	}
	rest := make([]string, 0, len(p.Keys)-len(won))
	for _, k := range p.Keys {
		if !claimed[k] {
			rest = append(rest, k)
		}
	}
	if list, err = json.Marshal(rest); err != nil {
		return nil, err
	}
	live, err := e.q.KeyGetBatch(ctx, tx, sqlitedb.KeyGetBatchParams{
		Now: now, Namespace: int64(p.Namespace), Scope: p.Scope, KeyList: string(list),
	})
	if err != nil {
		return nil, err
	}
	// A key gone or lapsed since the claim (see KeyGet) is left undecided.
	for _, r := range live {
		if r.HasResponse == 1 && r.Response == nil {
			r.Response = []byte{}
		}
		rows = append(rows, driver.BatchRow{Key: r.IdempotencyKey, Available: r.Available == 1,
			Existing: driver.Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Locked == 1}})
	}
	return driver.BatchClaims(p.Keys, rows), nil
}
