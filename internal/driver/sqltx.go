package driver

import (
	"context"
	"database/sql"
)

// The helpers below serve the drivers built on database/sql (MySQL and
// SQLite), whose transactions and savepoints work alike.

// SQLInTx runs fn in a transaction begun on db with the server's default
// options, and commits it if fn succeeds; a COMMIT whose outcome is
// unknown returns an error matching ErrCommitUnknown (see CommitError).
// db must not be nil. A panic in
// fn rolls the transaction back, giving its connection back to the pool,
// and goes on.
func SQLInTx(ctx context.Context, db *sql.DB, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return SQLInTxWith(ctx, db, nil, fn)
}

// SQLInTxWith is SQLInTx with the transaction's options (nil: the
// server's defaults).
func SQLInTxWith(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(ctx, tx); err != nil {
		return err
	}
	live := ctx.Err() == nil
	return CommitError(tx.Commit(), live)
}

// NonNil returns b, or an empty slice for nil, which would bind as NULL.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
