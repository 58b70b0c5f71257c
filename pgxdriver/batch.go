package pgxdriver

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var (
	_ driver.BatchClaimer[pgx.Tx] = engine{}
	_ driver.BatchRunner[pgx.Tx]  = engine{}
)

// ClaimBatch claims every key of the batch in one statement.
func (e engine) ClaimBatch(ctx context.Context, tx pgx.Tx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	var (
		pl     pipeline
		claims []driver.BatchClaim
	)
	pl.then(e.claimBatch(ctx, &pl, p, &claims))
	if err := pl.send(ctx, tx); err != nil {
		return nil, err
	}
	return claims, nil
}

// RunBatch is ClaimBatch in a transaction of its own, whose BEGIN travels
// with the claim (one round trip), and whose COMMIT ends fn: a batch whose
// fn sends one statement takes the bare transaction's three round trips.
// It needs a *pgxpool.Pool or a *pgx.Conn to pipeline on; with any other
// Beginner it returns driver.ErrNoRun.
func (e engine) RunBatch(ctx context.Context, p driver.BatchParams, fn func(ctx context.Context, tx pgx.Tx, claims []driver.BatchClaim) error) error {
	return e.onConn(ctx, func(conn *pgx.Conn) error {
		return endOnError(ctx, conn, func(conn *pgx.Conn) error { return e.runBatchOn(ctx, conn, p, fn) })
	})
}

// runBatchOn is RunBatch on conn, in one transaction.
func (e engine) runBatchOn(ctx context.Context, conn *pgx.Conn, p driver.BatchParams, fn func(ctx context.Context, tx pgx.Tx, claims []driver.BatchClaim) error) error {
	var (
		pl     pipeline
		claims []driver.BatchClaim
	)
	pl.begin(runTxOptions)
	pl.then(e.claimBatch(ctx, &pl, p, &claims))
	if err := pl.send(ctx, conn); err != nil {
		return err
	}
	if err := fn(ctx, pl.tx, claims); err != nil {
		return err
	}
	if conn.PgConn().TxStatus() == 'I' {
		return driver.ErrTxEnded
	}
	pl = pipeline{}
	pl.commit()
	live := ctx.Err() == nil
	if err := pl.send(ctx, conn); err != nil {
		return commitError(err, live)
	}
	return nil
}

// claimBatch queues the batch claim of p on pl and returns its reader,
// which sets *claims.
func (e engine) claimBatch(ctx context.Context, pl *pipeline, p driver.BatchParams, claims *[]driver.BatchClaim) func() error {
	r := e.q.KeyClaimBatch(ctx, e.on(pl), []pgdb.KeyClaimBatchParams{{
		Keys: p.Keys, Namespace: int16(p.Namespace), Scope: p.Scope, Now: pgNow(p.Now), TtlUs: p.TTL.Microseconds(),
	}})
	return func() (err error) {
		r.Query(func(_ int, rows []pgdb.KeyClaimBatchRow, e error) {
			if err = e; err != nil {
				return
			}
			out := make([]driver.BatchRow, len(rows))
			for i, r := range rows {
				out[i] = driver.BatchRow{Key: r.IdempotencyKey, Won: r.Inserted, Token: r.Token, Available: r.Available,
					Existing: driver.Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Locked}}
			}
			*claims = driver.BatchClaims(p.Keys, out)
		})
		return err
	}
}
