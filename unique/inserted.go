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
// One row is FirstRun: this call inserted it. Zero rows is AlreadyDone:
// a row with the key is there, committed by an earlier call (or inserted
// earlier in this transaction). More than one row is an error matching
// sqlonce.ErrTooManyRows (a statement of several rows), a negative count
// one matching sqlonce.ErrInvalidArgument.
//
// No savepoint is needed and none is taken: the statement does not fail
// on the key, so it needs no more round trips than the bare transaction,
// first run and repeat alike, on PostgreSQL too. Inserted runs no SQL of
// its own and needs no Inserter.
//
// Name the conflict target, the key's columns or, on PostgreSQL, ON
// CONFLICT ON CONSTRAINT orders_code_key: the database then checks that a
// conflict is on that key, and a duplicate on any other unique constraint
// is still an error of the statement's. A bare ON CONFLICT DO NOTHING
// takes a duplicate on every unique constraint for a repeat, a different
// order colliding on another unique column included. Every other error
// (NOT NULL, a foreign key, a deadlock) is the statement's own: check it
// before calling Inserted, and on PostgreSQL roll the transaction back
// after one, as after any failed statement.
//
// A concurrent insert of the same key waits for the other transaction, as
// a plain INSERT does: if it commits, 0 rows; if it rolls back, 1. Under
// PostgreSQL's REPEATABLE READ and SERIALIZABLE a conflict with a row the
// transaction's snapshot cannot see is a serialization failure (40001)
// instead of 0 rows: sqlonce.IsRetryable is true for it.
//
// PostgreSQL (9.5 and later) and SQLite (3.24 and later) have this
// statement. MySQL and MariaDB have no conflict target: INSERT IGNORE and
// INSERT ... ON DUPLICATE KEY UPDATE id = id give up on a duplicate of any
// unique key, and INSERT IGNORE also turns NOT NULL, foreign-key and
// conversion errors into warnings. Use [Inserter.InsertOne] there, which
// needs no savepoint on MySQL either.
//
// To return the existing row on a repeat, read it when res is AlreadyDone,
// as InsertOrGet does; under PostgreSQL's READ COMMITTED the read sees the
// row the statement found.
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
