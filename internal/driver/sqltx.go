package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
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

// savepoints names savepoints uniquely: MySQL silently replaces an older
// savepoint of the same name, and nested guards must never release or roll
// back to one another's.
var savepoints atomic.Uint64

// SQLSavepoint runs fn under a savepoint of tx and rolls back to it if fn
// fails. ROLLBACK TO leaves the savepoint in place; releaseOnError also
// releases it then. The statements are not sqlc queries: sqlc parses no
// SAVEPOINT, and a savepoint name cannot be a parameter.
func SQLSavepoint(ctx context.Context, tx *sql.Tx, releaseOnError bool, fn func(ctx context.Context) error) error {
	name := fmt.Sprintf("sqlonce_sp_%d", savepoints.Add(1))
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		if releaseOnError {
			if _, rbErr := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); rbErr != nil {
				return errors.Join(err, fmt.Errorf("release savepoint: %w", rbErr))
			}
		}
		return err
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
	return err
}

// NonNil returns b, or an empty slice for nil, which would bind as NULL.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
