package pgsqldriver

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.BatchClaimer[*sql.Tx] = engine{}

// ClaimBatch claims every key of the batch in one statement, pgxdriver's,
// with the keys bound as one JSON array (a string to either library).
func (e engine) ClaimBatch(ctx context.Context, tx *sql.Tx, p driver.BatchParams) (_ []driver.BatchClaim, err error) {
	defer func() { err = canceled(ctx, err) }()
	list, err := json.Marshal(p.Keys)
	if err != nil {
		return nil, err
	}
	rows, err := e.q.KeyClaimBatch(ctx, tx, pgsqldb.KeyClaimBatchParams{
		KeyList: string(list), Namespace: int16(p.Namespace), Scope: p.Scope, Now: pgNow(p.Now), TtlUs: p.TTL.Microseconds(),
	})
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]pgsqldb.KeyClaimBatchRow, len(rows))
	for _, r := range rows {
		byKey[r.IdempotencyKey] = r
	}
	out := make([]driver.BatchClaim, len(p.Keys))
	for i, k := range p.Keys {
		r, ok := byKey[k]
		switch {
		case !ok || r.Available:
			// Committed while the insert waited, or to take over: alone.
		case r.Inserted:
			out[i] = driver.BatchClaim{Claim: driver.Claim{Won: true, Token: r.Token}, Decided: true}
		default:
			out[i] = driver.BatchClaim{Claim: driver.Claim{Existing: driver.Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Locked}}, Decided: true}
		}
	}
	return out, nil
}
