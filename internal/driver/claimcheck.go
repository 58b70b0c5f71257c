package driver

import "context"

// ClaimChecker is implemented by engines on which a caller's transaction
// can lose its claim while the work goes on without an error reaching
// sqlonce: through Vitess's vtgate, a statement of the work that reaches a
// second shard makes vtgate roll the whole transaction back, and work that
// swallows that error runs its next statements in autocommit, up to a
// COMMIT that answers OK on nothing.
//
// A claim that records nothing after the work by the claim's token (Do,
// DoBatch, and Run and RunBatch on the generic path) calls CheckClaim after
// the work succeeded and before answering FirstRun; a response write by
// the token (SetResponse) finds a lost claim by itself. CheckClaim returns
// nil when tx still holds the claim made with token, and an error, whose
// class includes TxRolledBack, when it does not. An engine answers without
// a round trip where its transactions cannot lose a claim that way (the
// MySQL driver's off vtgate); engines that never can do not implement it.
type ClaimChecker[TTx any] interface {
	CheckClaim(ctx context.Context, tx TTx, k Key, token int64) error
}

// CheckClaim calls c's CheckClaim when c is not nil (an engine's
// Capabilities.ClaimChecker), and is nil otherwise.
func CheckClaim[TTx any](ctx context.Context, c ClaimChecker[TTx], tx TTx, k Key, token int64) error {
	if c == nil {
		return nil
	}
	return c.CheckClaim(ctx, tx, k, token)
}
