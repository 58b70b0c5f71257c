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
	rows, err := e.q.KeyClaimBatch(ctx, e.on(tx), pgsqldb.KeyClaimBatchParams{
		KeyList: string(list), Namespace: int16(p.Namespace), Scope: p.Scope, Now: pgNow(p.Now), TtlUs: p.TTL.Microseconds(),
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
