package driver

import "context"

// Autocommitter is implemented by engines that can run statements in
// autocommit on the driver's handle, each committed on its own with no
// BEGIN or COMMIT round trip around it. sqlonce uses it only for
// operations of one statement (a lease's Complete and Release), or of
// statements each of which decides on its own whatever ran before it (a
// lease's Claim: an insert, or a conditional takeover, committed at once),
// where a transaction around them would add two round trips and no
// guarantee.
type Autocommitter[TTx any] interface {
	// Autocommit calls fn with a TTx whose statements run in autocommit.
	// Its savepoints, commit and rollback do nothing or fail: fn must not
	// need them. It returns ErrNoRun when the driver's handle cannot run
	// statements outside a transaction, and sqlonce.ErrNoDB without one.
	Autocommit(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
}
