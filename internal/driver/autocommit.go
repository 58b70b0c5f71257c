package driver

import (
	"context"
	"database/sql"
)

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
	// statements outside a transaction.
	Autocommit(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
}

// AutoTx stands for "no transaction" where a database/sql driver's engine
// takes a *sql.Tx: the *sql.Tx that SQLAutocommit hands fn. A driver's
// statements given it run on the driver's *sql.DB, each committed on its
// own; it is never a real transaction, and never reaches the caller (the
// strategies call Autocommit only for statements of their own). Its
// methods must not be called: the drivers test for it by identity.
var AutoTx = new(sql.Tx)

// SQLAutocommit is Autocommit for the database/sql drivers: fn gets
// AutoTx. Each statement is its own COMMIT: one whose connection is lost
// on the way may have committed (CommitError).
func SQLAutocommit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	live := ctx.Err() == nil
	return CommitError(fn(ctx, AutoTx), live)
}

// On returns where a database/sql driver runs a statement given tx: the
// handle db in autocommit for AutoTx, tx itself otherwise.
func On(tx *sql.Tx, db *sql.DB) interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
} {
	if tx == AutoTx {
		return db
	}
	return tx
}
