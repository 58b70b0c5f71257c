package driver

import (
	"context"
	"time"
)

// MaxBatch is the most keys a batch claim takes: the MySQL driver walks a
// batch's JSON array with a table of the numbers 0 to 999.
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
