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
	out := make([]driver.BatchRow, len(rows))
	for i, r := range rows {
		out[i] = driver.BatchRow{Key: r.IdempotencyKey, Won: r.Inserted, Token: r.Token, Available: r.Available,
			Existing: driver.Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Locked}}
	}
	return driver.BatchClaims(p.Keys, out), nil
}
