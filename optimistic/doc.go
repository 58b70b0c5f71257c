// Package optimistic judges version-column updates by their affected rows.
//
// The caller runs its own version-checked UPDATE, sqlc-generated with
// :execrows or written by hand, in its own transaction, and hands the row
// count to [Update] with a function that reads the current version:
//
//	rows, err := q.DebitAccount(ctx, tx, db.DebitAccountParams{ID: id, Version: v, Amount: 100})
//	if err != nil { ... }
//	res, err := optimistic.Update(ctx, rows, v, func(ctx context.Context) (int64, error) {
//		return q.GetAccountVersion(ctx, tx, id)
//	})
//
// # What AlreadyDone means here
//
// Zero rows with a version past the expected one says the row moved on. It
// cannot say who moved it: a repeat of this very request that succeeded
// earlier, or another writer. Where that difference matters (a relative
// update such as a debit), claim the request's key with
// [github.com/sqlonce/sqlonce/dedupe] in the same transaction.
//
// # MySQL and MariaDB
//
// The server reports changed rows, not matched rows, unless the DSN sets
// clientFoundRows=true. An UPDATE that bumps the version always changes the
// row, so both counts agree. Under REPEATABLE READ (MySQL's default) a
// plain SELECT of the version reads the transaction's snapshot, which may
// predate the write that made the UPDATE miss: read the version with
// LOCK IN SHARE MODE (FOR SHARE on MySQL 8), or [Update] returns
// [github.com/sqlonce/sqlonce.ErrStaleRead], which is retryable. MariaDB
// with innodb_snapshot_isolation=ON (its default from 11.6) refuses the
// UPDATE itself with error 1020, as PostgreSQL's REPEATABLE READ does with
// 40001; both are retryable too.
package optimistic
