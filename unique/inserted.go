package unique

import (
	"context"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Inserted judges an insert that cannot fail on its key by the rows it
// affected, as optimistic.Update judges a version-checked UPDATE: the
// caller passes the count its own statement returned (sqlc's :execrows),
// a statement of the form
//
//	INSERT INTO orders (code, amount) VALUES ($1, $2) ON CONFLICT (code) DO NOTHING
//
// One row is FirstRun, zero rows AlreadyDone (a row with the key is
// there). More than one row is an error matching sqlonce.ErrTooManyRows, a
// negative count one matching sqlonce.ErrInvalidArgument. Inserted runs no
// SQL, takes no savepoint and needs no Inserter; it is safe for concurrent
// use.
//
// Name the conflict target: a bare ON CONFLICT DO NOTHING takes a
// duplicate on any unique constraint for a repeat. PostgreSQL and SQLite
// have this statement; on MySQL/MariaDB, which have no conflict target,
// use [Inserter.InsertOne]. Details per database:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#names-of-unique-constraints
func Inserted(ctx context.Context, rows int64) (res sqlonce.Result, err error) {
	op := obs.Start(obs.FromContext(ctx), "unique", "Inserted", "", "")
	defer func() { err = op.End(ctx, res, err) }()
	switch {
	case rows == 1:
		return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
	case rows == 0:
		return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
	case rows > 1:
		return sqlonce.Result{}, fmt.Errorf("%w: insert affected %d rows, want at most 1", sqlonce.ErrTooManyRows, rows)
	default:
		return sqlonce.Result{}, fmt.Errorf("%w: affected rows %d is negative", sqlonce.ErrInvalidArgument, rows)
	}
}
