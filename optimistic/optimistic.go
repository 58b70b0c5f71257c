package optimistic

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Update judges a version-checked UPDATE by the number of rows it affected:
//
//	UPDATE accounts SET balance = balance - 100, version = version + 1
//	WHERE id = $1 AND version = $2
//
// rows is that statement's affected-row count (sqlc's :execrows,
// pgconn.CommandTag.RowsAffected, sql.Result.RowsAffected). expected is the
// version the statement checked. current reads the row's version now; it is
// called only when rows is 0, but must not be nil.
//
// Outcomes:
//   - rows == 1: FirstRun, this call made the update;
//   - rows == 0 and the version has moved past expected: AlreadyDone;
//   - rows == 0 and the row is gone (current returns an error matching
//     sql.ErrNoRows or pgx.ErrNoRows, or sqlonce.ErrNotFound): an error
//     matching sqlonce.ErrNotFound;
//   - rows == 0 and current still reads expected: sqlonce.ErrStaleRead
//     (retryable). The read did not see what the UPDATE saw: on MySQL under
//     REPEATABLE READ, read with FOR SHARE / LOCK IN SHARE MODE;
//   - rows == 0 and current is below expected: an error matching
//     sqlonce.ErrInvalidArgument (expected was never stored);
//   - rows > 1: sqlonce.ErrTooManyRows, the WHERE clause is not on a key;
//   - any error from current passes through, wrapped.
//
// A version alone cannot tell this caller's earlier success from another
// writer's update: both move the version on. AlreadyDone here means "the
// row has moved past the version this call expected". Callers who must know
// that the update was theirs combine Update with dedupe, claiming the
// request's key in the same transaction.
//
// The UPDATE must always change the row (version = version + 1 does), so
// that MySQL's default changed-rows count equals the matched-rows count
// whatever the client's clientFoundRows setting.
func Update[V cmp.Ordered](ctx context.Context, rows int64, expected V, current func(ctx context.Context) (V, error)) (res sqlonce.Result, err error) {
	op := obs.Start(obs.FromContext(ctx), "optimistic", "Update", "", "")
	defer func() { err = op.End(ctx, res, err) }()
	return update(ctx, rows, expected, current)
}

func update[V cmp.Ordered](ctx context.Context, rows int64, expected V, current func(ctx context.Context) (V, error)) (sqlonce.Result, error) {
	switch {
	case current == nil:
		// Refused on the first run too: otherwise it would only fail on a
		// repeat, the path least often exercised.
		return sqlonce.Result{}, fmt.Errorf("%w: nil current", sqlonce.ErrInvalidArgument)
	case rows == 1:
		return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
	case rows > 1:
		return sqlonce.Result{}, fmt.Errorf("%w: version-checked update affected %d rows", sqlonce.ErrTooManyRows, rows)
	case rows < 0:
		return sqlonce.Result{}, fmt.Errorf("%w: affected rows %d is negative", sqlonce.ErrInvalidArgument, rows)
	}
	v, err := current(ctx)
	if err != nil {
		if isNoRows(err) {
			return sqlonce.Result{}, fmt.Errorf("%w: %w", sqlonce.ErrNotFound, err)
		}
		return sqlonce.Result{}, fmt.Errorf("sqlonce/optimistic: read current version: %w", err)
	}
	switch cmp.Compare(v, expected) {
	case 1:
		return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
	case 0:
		return sqlonce.Result{}, fmt.Errorf("%w: update matched no row but the version still reads %v", sqlonce.ErrStaleRead, v)
	default:
		return sqlonce.Result{}, fmt.Errorf("%w: current version %v is below the expected %v", sqlonce.ErrInvalidArgument, v, expected)
	}
}

func isNoRows(err error) bool {
	// pgx.ErrNoRows matches sql.ErrNoRows.
	return errors.Is(err, sql.ErrNoRows) || errors.Is(err, sqlonce.ErrNotFound)
}
