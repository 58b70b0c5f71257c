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
	tokens := make(map[string]int64, len(won))
	for _, r := range won {
		tokens[r.IdempotencyKey] = r.Token
	}
	out := make([]driver.BatchClaim, len(p.Keys))
	if len(won) == len(p.Keys) {
		for i, k := range p.Keys {
			out[i] = driver.BatchClaim{Claim: driver.Claim{Won: true, Token: tokens[k]}, Decided: true}
		}
		return out, nil
	}
	rest := make([]string, 0, len(p.Keys)-len(won))
	for _, k := range p.Keys {
		if _, ok := tokens[k]; !ok {
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
	byKey := make(map[string]sqlitedb.KeyGetBatchRow, len(live))
	for _, r := range live {
		byKey[r.IdempotencyKey] = r
	}
	for i, k := range p.Keys {
		if token, ok := tokens[k]; ok {
			out[i] = driver.BatchClaim{Claim: driver.Claim{Won: true, Token: token}, Decided: true}
			continue
		}
		r, ok := byKey[k]
		if !ok || r.Available == 1 {
			// Gone or lapsed since the claim (see KeyGet): alone.
			continue
		}
		if r.HasResponse == 1 && r.Response == nil {
			r.Response = []byte{}
		}
		out[i] = driver.BatchClaim{Claim: driver.Claim{Existing: driver.Existing{
			Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Locked == 1,
		}}, Decided: true}
	}
	return out, nil
}
