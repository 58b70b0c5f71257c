package driver

import (
	"context"
	"time"
)

// MaxBatch is the most keys a batch claim takes: on a server without
// JSON_TABLE (MariaDB 10.5) the MySQL driver walks a batch's JSON array
// with a table of the numbers 0 to 999.
const MaxBatch = 1000

// BatchClaimer is implemented by engines that claim the keys of a batch in
// a constant number of statements. Engines without it are claimed one key
// at a time.
type BatchClaimer[TTx any] interface {
	// ClaimBatch claims p.Keys in tx, each as Claim claims a key done with
	// tx (no fingerprint, no lease, waiting without bound). It returns one
	// BatchClaim per key of p.Keys, in order. A key it cannot decide in its
	// statements (an expired key or a lapsed lease to take over, a row
	// committed while it waited that its snapshot cannot see, a row purged
	// between its statements) has Decided false: the caller claims that
	// key alone.
	ClaimBatch(ctx context.Context, tx TTx, p BatchParams) ([]BatchClaim, error)
}

// BatchParams describes a batch claim.
type BatchParams struct {
	Namespace Namespace
	Scope     string
	// Keys are distinct and sorted, so that two batches lock shared keys
	// in the same order; at most MaxBatch.
	Keys []string
	TTL  time.Duration
	// Now pins the database's "now" (tests only).
	Now time.Time
}

// BatchClaim is one key's outcome in a batch claim.
type BatchClaim struct {
	Claim
	Decided bool
}

// BatchRow is one key's row as a batch claim's statements return it.
type BatchRow struct {
	Key string
	// Won: the batch's statement inserted the row, with Token.
	Won   bool
	Token int64
	// Available: expired, or a lapsed lease, to take over alone.
	Available bool
	// Existing: the row another transaction recorded, when not Won.
	Existing Existing
}

// BatchClaims returns one BatchClaim per key of keys, in order, from the
// rows a batch claim's statements returned, in any order: a key without a
// row (committed while the claim waited, or purged since) or with an
// available one is left undecided.
func BatchClaims(keys []string, rows []BatchRow) []BatchClaim {
	byKey := make(map[string]BatchRow, len(rows))
	for _, r := range rows {
		byKey[r.Key] = r
	}
	out := make([]BatchClaim, len(keys))
	for i, k := range keys {
		r, ok := byKey[k]
		switch {
		case !ok || r.Available:
		case r.Won:
			out[i] = BatchClaim{Claim: Claim{Won: true, Token: r.Token}, Decided: true}
		default:
			out[i] = BatchClaim{Claim: Claim{Existing: r.Existing}, Decided: true}
		}
	}
	return out
}

// BatchRunner is implemented by engines that claim a batch in the round
// trip that begins a transaction of their own (pgx pipelines BEGIN with
// the claim).
type BatchRunner[TTx any] interface {
	// RunBatch begins a transaction on the engine's handle, claims p.Keys
	// in it as ClaimBatch does, and calls fn with the transaction and the
	// claims; it commits when fn returns nil, and rolls back otherwise.
	// ErrNoRun when the engine's handle cannot (the caller runs
	// ClaimBatch in InTx instead); ErrTxEnded when fn ended the
	// transaction.
	RunBatch(ctx context.Context, p BatchParams, fn func(ctx context.Context, tx TTx, claims []BatchClaim) error) error
}
