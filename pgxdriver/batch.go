package pgxdriver

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.BatchClaimer[pgx.Tx] = engine{}

// ClaimBatch claims every key of the batch in one statement.
func (e engine) ClaimBatch(ctx context.Context, tx pgx.Tx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	rows, err := e.q.KeyClaimBatch(ctx, tx, pgdb.KeyClaimBatchParams{
		Keys: p.Keys, Namespace: int16(p.Namespace), Scope: p.Scope, Now: pgNow(p.Now), TtlUs: p.TTL.Microseconds(),
	})
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]pgdb.KeyClaimBatchRow, len(rows))
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
