package pgxdriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.Runner[pgx.Tx] = engine{}

// runTxOptions begin Store.Run's transaction: READ COMMITTED, as every
// transaction sqlonce runs itself (see InTx).
var runTxOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// Run is dedupe.Store.Run on PostgreSQL, in the round trips of a bare
// transaction: BEGIN travels with the key's advisory lock and a read of the
// key taken after it (pgx's Batch.BeginTx), and the key's record with
// COMMIT; fn gets pgx's own Tx. The advisory lock makes a concurrent run of
// the key wait, then read what the first committed; the record is a plain
// INSERT, so that a key recorded meanwhile by anyone (Do, a lease, a run
// that lost its lock to a collision) fails it, and the COMMIT behind it
// with it. When fn fails, the key is read once more after the rollback,
// and a key recorded meanwhile (by a Do whose transaction was open when
// Run read it, and whose work fn's collided with) answers instead of fn's
// error. With dedupe.FavorRepeats the key is read first, in a round trip
// of its own outside any transaction, and a repeat ends there. It needs a
// *pgxpool.Pool or a *pgx.Conn to pipeline on; with any other Beginner,
// and for a Store that must not wait, it returns driver.ErrNoRun.
func (e engine) Run(ctx context.Context, p driver.RunParams, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (res driver.RunResult, err error) {
	err = e.onConn(ctx, func(conn *pgx.Conn) (err error) {
		res, err = e.runAnswered(ctx, conn, p, fn)
		return err
	})
	return res, err
}

// onConn calls fn with a connection of the engine's handle: one acquired
// from a *pgxpool.Pool, or the *pgx.Conn itself; with any other Beginner
// it returns driver.ErrNoRun. fn ends what it begins (see endOnError).
func (e engine) onConn(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	switch db := e.db.(type) {
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return err
		}
		// A connection still in a transaction (an error before rollback
		// could run) is closed by Release, not reused.
		defer c.Release()
		return fn(c.Conn())
	case *pgx.Conn:
		return fn(db)
	default:
		return driver.ErrNoRun
	}
}

// endOnError calls fn with conn, and rolls back what fn left open on it
// when fn fails or panics.
func endOnError(ctx context.Context, conn *pgx.Conn, fn func(conn *pgx.Conn) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			rollback(ctx, conn)
			panic(p)
		}
		if err != nil {
			rollback(ctx, conn)
		}
	}()
	return fn(conn)
}

// runOn runs on conn: runHeld for a Store that must not wait and for the
// inbox, run otherwise.
func (e engine) runOn(ctx context.Context, conn *pgx.Conn, p driver.RunParams, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (driver.RunResult, error) {
	if p.LockWait > 0 || p.NoRecord {
		return e.runHeld(ctx, conn, p, fn)
	}
	return e.run(ctx, conn, p, fn)
}

// runAnswered is run, which holds only the key's advisory lock while fn
// runs, and so keeps Runs apart but not a Do that holds the key's row in
// a transaction still open when run reads it. fn may then fail because
// that Do committed while it ran: its work collides with the Do's (a
// unique order code, say). When fn fails, runAnswered reads the key again
// after the rollback, in a round trip of its own, and answers from a key
// that is now recorded instead of returning fn's error, as
// driver.SQLRun does: the repeat gets the first run's answer, as it would
// have had it come later.
func (e engine) runAnswered(ctx context.Context, conn *pgx.Conn, p driver.RunParams, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (driver.RunResult, error) {
	var fnFailed bool
	var res driver.RunResult
	err := endOnError(ctx, conn, func(conn *pgx.Conn) (err error) {
		res, err = e.runOn(ctx, conn, p, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			resp, err := fn(ctx, tx)
			fnFailed = err != nil
			return resp, err
		})
		return err
	})
	if err == nil || !fnFailed || ctx.Err() != nil || p.LockWait > 0 || p.NoRecord || conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		return res, err
	}
	var (
		pl    pipeline
		row   pgdb.KeyGetRow
		found bool
	)
	pl.then(e.lookup(ctx, &pl, pgdb.KeyGetParams{Now: pgNow(p.Now), Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key}, &row, &found))
	if lErr := pl.send(ctx, conn); lErr != nil || !found || row.Available {
		return res, err
	}
	return driver.RunResult{Existing: driver.Existing{Fingerprint: row.Fingerprint, Response: row.Response, Leased: row.Locked}}, nil
}

// runHeld is Run that claims the key's row before fn, as Do does, in the
// round trip of BEGIN, and records the response in the round trip of
// COMMIT: the bare transaction's three round trips. It serves a Store that
// must not wait (WithNoWait, WithLockWait), which must see a key that a Do
// or a lease holds in a transaction still open before fn runs (the
// advisory lock of run only keeps Runs apart): its claim's lock waits are
// bounded by p.LockWait, lock_timeout restored behind it, and a claim that
// gave up is sqlonce.ErrInProgress. It serves the inbox (p.NoRecord),
// which records no response: its COMMIT travels alone.
func (e engine) runHeld(ctx context.Context, conn *pgx.Conn, p driver.RunParams, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (driver.RunResult, error) {
	type begun struct {
		tx    pgx.Tx
		c     pgdb.KeyClaimRow
		found bool
	}
	begin := func() (b begun, err error) {
		var pl pipeline
		pl.begin(runTxOptions)
		e.boundedClaim(ctx, &pl, claimParams(p), p.LockWait, &b.c, &b.found)
		if err := pl.send(ctx, conn); err != nil {
			rollback(ctx, conn)
			if conn.IsClosed() {
				return b, driver.NotRestored(err, errors.New("the connection closed at ROLLBACK"))
			}
			return b, err
		}
		b.tx = pl.tx
		return b, nil
	}
	var b begun
	var err error
	if p.LockWait > 0 {
		// A claim that gave up on a lock that is not the key's begins again.
		b, err = driver.PastOtherLocks(ctx, p.LockWait, lockElsewhere, begin)
	} else {
		b, err = begin()
	}
	if err != nil {
		return driver.RunResult{}, inProgress(p, err)
	}
	tx := b.tx
	cl, ok := decided(b.c, b.found)
	if !ok {
		// Rare: committed while the claim waited, or free to take over.
		if p.LockWait > 0 {
			cl, err = driver.PastOtherLocks(ctx, p.LockWait, lockElsewhere, func() (driver.Claim, error) { return e.claimBoundedSteps(ctx, tx, p) })
		} else {
			cl, err = e.claim(ctx, tx, p)
		}
		if err != nil {
			return driver.RunResult{}, inProgress(p, err)
		}
	}
	if !cl.Won {
		rollback(ctx, conn)
		return driver.RunResult{Existing: cl.Existing}, nil
	}
	resp, err := fn(ctx, tx)
	if err != nil {
		return driver.RunResult{}, err
	}
	if conn.PgConn().TxStatus() == 'I' {
		return driver.RunResult{}, driver.ErrTxEnded
	}
	var pl pipeline
	if !p.NoRecord {
		pl.thenExec(e.q.KeyRunRespond(ctx, e.on(&pl), []pgdb.KeyRunRespondParams{{
			Response: driver.NonNil(resp), Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key, Token: cl.Token,
		}}))
	}
	pl.commit()
	live := ctx.Err() == nil
	if err := pl.send(ctx, conn); err != nil {
		return driver.RunResult{}, commitError(err, live)
	}
	return driver.RunResult{Won: true, Response: resp, Takeover: cl.Takeover}, nil
}

// inProgress marks a claim that gave up waiting for the key's holder as
// sqlonce.ErrInProgress. The cause is formatted, not wrapped, as dedupe
// does for a claim: Run's transaction is gone, and retrying it would be
// waiting after all.
func inProgress(p driver.RunParams, err error) error {
	if driver.Classify(err).Has(driver.LockNotAvailable) {
		return fmt.Errorf("%w: key %q in scope %q is held by another transaction (%v)", sqlonce.ErrInProgress, p.Key.Key, p.Scope, err)
	}
	return err
}

func (e engine) run(ctx context.Context, conn *pgx.Conn, p driver.RunParams, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (res driver.RunResult, err error) {
	get := pgdb.KeyGetParams{Now: pgNow(p.Now), Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key}
	var (
		row   pgdb.KeyGetRow
		found bool
	)
	if p.Favor == driver.FavorRepeats {
		// A round trip of its own, outside any transaction: a repeat ends
		// here; a first run goes on as below, which reads the key again.
		var pl pipeline
		pl.then(e.lookup(ctx, &pl, get, &row, &found))
		if err := pl.send(ctx, conn); err != nil {
			return res, err
		}
		if found && !row.Available {
			return driver.RunResult{Existing: driver.Existing{Fingerprint: row.Fingerprint, Response: row.Response, Leased: row.Locked}}, nil
		}
	}

	// Round trip 1: BEGIN, the key's lock if it is free, and the key, read
	// after the lock.
	var pl pipeline
	pl.begin(runTxOptions)
	var locked bool
	try := e.q.KeyTryLock(ctx, e.on(&pl), []pgdb.KeyTryLockParams{{Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key}})
	pl.then(func() (err error) {
		try.QueryRow(func(_ int, got bool, e error) { err, locked = e, got })
		return err
	})
	pl.then(e.lookup(ctx, &pl, get, &row, &found))
	if err := pl.send(ctx, conn); err != nil {
		return res, err
	}
	// The Tx is pgx's, begun by this batch; the COMMIT below goes round
	// it, on the connection, and the Tx is dropped.
	tx := pl.tx
	if !locked {
		// Another run holds the key: wait for its lock, then read the key
		// with a statement of its own, so that under READ COMMITTED it sees
		// what that run committed.
		pl = pipeline{}
		pl.thenExec(e.q.KeyLock(ctx, e.on(&pl), []pgdb.KeyLockParams{{Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key}}))
		pl.then(e.lookup(ctx, &pl, get, &row, &found))
		if err := pl.send(ctx, conn); err != nil {
			return res, err
		}
	}
	if found && !row.Available {
		rollback(ctx, conn)
		return driver.RunResult{Existing: driver.Existing{Fingerprint: row.Fingerprint, Response: row.Response, Leased: row.Locked}}, nil
	}

	resp, err := fn(ctx, tx)
	if err != nil {
		return res, err
	}
	if conn.PgConn().TxStatus() == 'I' {
		return res, driver.ErrTxEnded
	}

	// Round trip 3: the key, done, with the response; COMMIT.
	pl = pipeline{}
	var minToken int64
	if found {
		// Expired, or a lapsed lease: delete the row seen if it still is.
		// If it changed since (taken over, completed late by its lease
		// holder), the row fails the INSERT.
		pl.thenExec(e.q.KeyRunDelete(ctx, e.on(&pl), []pgdb.KeyRunDeleteParams{{Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key, Token: row.Token, Now: get.Now}}))
		minToken = row.Token + 1
	}
	pl.thenExec(e.q.KeyRunInsert(ctx, e.on(&pl), []pgdb.KeyRunInsertParams{{
		Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key,
		Fingerprint: driver.NonNil(p.Fingerprint), Response: driver.NonNil(resp),
		Now: get.Now, MinToken: minToken, TtlUs: p.TTL.Microseconds(),
	}}))
	pl.commit()
	live := ctx.Err() == nil
	if err := pl.send(ctx, conn); err != nil {
		if uniqueViolation(err, "sqlonce_keys_pkey") {
			return res, fmt.Errorf("%w: key %q in scope %q was recorded by another transaction: %w", sqlonce.ErrStaleRead, p.Key.Key, p.Scope, err)
		}
		// The connection broke with COMMIT in the batch: the key and
		// fn's work may have committed.
		return res, commitError(err, live)
	}
	return driver.RunResult{Won: true, Response: resp, Takeover: found}, nil
}

// lookup queues the key's KeyGet on pl and returns its reader.
func (e engine) lookup(ctx context.Context, pl *pipeline, get pgdb.KeyGetParams, row *pgdb.KeyGetRow, found *bool) func() error {
	r := e.q.KeyGet(ctx, e.on(pl), []pgdb.KeyGetParams{get})
	return func() (err error) {
		r.QueryRow(func(_ int, got pgdb.KeyGetRow, e error) {
			switch {
			case e == nil:
				*row, *found = got, true
			case errors.Is(e, pgx.ErrNoRows):
				*found = false
			default:
				err = e
			}
		})
		return err
	}
}

// rollback ends conn's transaction, if one is open. If that fails, the
// connection is closed: a pool discards it on Release.
func rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "rollback"); err != nil {
		_ = conn.Close(ctx)
	}
}

// pipeline is a pgdb.DBTX that collects the statements of sqlc's batch
// queries, and raw BEGIN and COMMIT, into one pgx.Batch: one round trip.
// Each queued statement has a reader, run in order once the batch is sent.
type pipeline struct {
	b     pgx.Batch
	br    pgx.BatchResults
	reads []func() error
	tx    pgx.Tx // begun by begin, once sent
}

var _ pgdb.DBTX = (*pipeline)(nil)

var errNotBatch = errors.New("pgxdriver: only batch queries run in a pipeline")

// begin queues BEGIN, first.
func (p *pipeline) begin(opts pgx.TxOptions) {
	p.b.BeginTx(opts)
	p.then(func() error {
		_, err := p.br.Exec()
		return err
	})
}

// commit queues COMMIT. A transaction that an error had aborted answers it
// with ROLLBACK, which is an error here.
func (p *pipeline) commit() {
	p.b.Queue("commit")
	p.then(func() error {
		tag, err := p.br.Exec()
		if err == nil && tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return err
	})
}

// exec queues a statement of no result that is not a sqlc query
// (SAVEPOINT, RELEASE).
func (p *pipeline) exec(sql string) {
	p.b.Queue(sql)
	p.then(func() error {
		_, err := p.br.Exec()
		return err
	})
}

// then adds the reader of the statements queued last through SendBatch.
func (p *pipeline) then(read func() error) { p.reads = append(p.reads, read) }

// thenExec adds the reader of a sqlc :batchexec query of one statement.
func (p *pipeline) thenExec(r interface{ Exec(func(int, error)) }) {
	p.then(func() (err error) {
		r.Exec(func(_ int, e error) { err = e })
		return err
	})
}

// batchSender is a *pgx.Conn, or a pgx.Tx to pipeline in.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// send sends the batch on conn, runs the readers and returns the first
// error. After an error the server skips the rest of the batch, so the
// later readers fail too.
func (p *pipeline) send(ctx context.Context, conn batchSender) error {
	p.br = conn.SendBatch(ctx, &p.b)
	p.tx = p.br.Tx()
	var first error
	for _, read := range p.reads {
		if err := read(); err != nil && first == nil {
			first = err
		}
	}
	if err := p.br.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

func (p *pipeline) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		p.b.Queue(q.SQL, q.Arguments...)
	}
	return pipelineResults{p}
}

func (p *pipeline) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNotBatch
}

func (p *pipeline) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errNotBatch
}

func (p *pipeline) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errNotBatch }

// pipelineResults reads a sqlc batch's results from the pipeline's, in
// order. Closing it leaves the pipeline's open: send closes that.
type pipelineResults struct{ p *pipeline }

func (r pipelineResults) Exec() (pgconn.CommandTag, error) { return r.p.br.Exec() }
func (r pipelineResults) Query() (pgx.Rows, error)         { return r.p.br.Query() }
func (r pipelineResults) QueryRow() pgx.Row                { return r.p.br.QueryRow() }
func (r pipelineResults) Close() error                     { return nil }
func (r pipelineResults) Tx() pgx.Tx                       { return nil }
