package pgxdriver

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.Autocommitter[pgx.Tx] = engine{}

// Autocommit runs fn's statements on the driver's *pgxpool.Pool or
// *pgx.Conn outside any transaction, each committed on its own.
func (e engine) Autocommit(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	db, ok := e.db.(pgdb.DBTX)
	if !ok {
		return driver.ErrNoRun
	}
	// Each statement is its own COMMIT: one whose connection is lost on
	// the way may have committed (driver.CommitError).
	live := ctx.Err() == nil
	return driver.CommitError(fn(ctx, autoTx{db}), live)
}

// errAutocommit is what autoTx answers where a transaction is needed.
var errAutocommit = errors.New("pgxdriver: no transaction: statements run in autocommit")

// autoTx is a pgx.Tx whose statements run in autocommit on a pool or a
// connection: Commit and Rollback have nothing to end, and what needs a
// transaction (a savepoint, a prepared statement on its connection, COPY)
// fails.
type autoTx struct{ db pgdb.DBTX }

func (t autoTx) Begin(context.Context) (pgx.Tx, error) { return nil, errAutocommit }
func (t autoTx) Commit(context.Context) error          { return nil }
func (t autoTx) Rollback(context.Context) error        { return nil }
func (t autoTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errAutocommit
}
func (t autoTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.db.SendBatch(ctx, b)
}
func (t autoTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }
func (t autoTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, errAutocommit
}
func (t autoTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.db.Exec(ctx, sql, args...)
}
func (t autoTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.db.Query(ctx, sql, args...)
}
func (t autoTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.db.QueryRow(ctx, sql, args...)
}
func (t autoTx) Conn() *pgx.Conn { return nil }
