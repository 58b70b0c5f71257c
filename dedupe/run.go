package dedupe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// Run runs fn once per key in a transaction of the Store's own. It begins
// the transaction on the driver's database handle, claims req's key, runs
// fn with the transaction, records fn's response with the key and
// commits: fn's work and the key commit together, or neither does. A
// repeat gets AlreadyDone with the recorded response, byte for byte.
//
// Use Run when the transaction exists for this operation alone (an HTTP or
// message handler); it is the fast path. Use Do or DoResponse to make one
// step of a larger transaction of yours idempotent.
//
// fn may run more than once: Run starts over, in a new transaction, after
// a deadlock or a serialization failure, or when another transaction
// recorded the key while fn ran; only the run that commits leaves anything
// behind. So fn does its work through tx only, and never commits or rolls
// back tx. fn's error rolls tx back and is returned unchanged, unless the
// key turns out to be recorded by then (AlreadyDone).
//
// A concurrent Run of the same key waits for the first to end, or gets
// sqlonce.ErrInProgress with WithNoWait or WithLockWait; a key leased by
// Claim answers sqlonce.ErrInProgress while the lease holds. A Store
// built WithAwaitResult waits for the answer instead. Run holds no
// lease: a ctx that ends rolls tx back, the claim with it, and leaves the
// key as it was, free for the next call at once (a lapsed lease it was
// taking over stays lapsed). Errors are those of DoResponse. Round trips
// and how concurrent Runs of a new key meet on each driver:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#round-trips-of-storerun
func (s *Store[TTx]) Run(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) ([]byte, error)) (res sqlonce.Result, err error) {
	if outer, ctx := obs.Take(ctx); outer != nil {
		// A package built on the Store (inbox, httpidem) observes the
		// operation as its own.
		return s.runOwn(ctx, req, fn, outer)
	}
	op := obs.Start(s.observer, "dedupe", "Run", req.Scope, req.Key)
	defer func() { err = op.End(ctx, res, err) }()
	return s.runOwn(ctx, req, fn, &op)
}

func (s *Store[TTx]) runOwn(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) ([]byte, error), op *obs.Op) (sqlonce.Result, error) {
	if fn == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	ttl, err := s.check(req)
	if err != nil {
		return sqlonce.Result{}, err
	}
	var fnErr error // the last error fn returned
	inner := fn
	fn = func(ctx context.Context, tx TTx) ([]byte, error) {
		resp, err := inner(ctx, tx)
		fnErr = err
		return resp, err
	}
	// named names the key in an error of sqlonce's own statements (BEGIN,
	// the read, the record, COMMIT) that does not name it already; fn's
	// error stays as fn returned it.
	named := func(res sqlonce.Result, err error) (sqlonce.Result, error) {
		if err == nil || (fnErr != nil && errors.Is(err, fnErr)) || strings.Contains(err.Error(), strconv.Quote(req.Key)) {
			return res, err
		}
		return res, fmt.Errorf("sqlonce/dedupe: run key %q: %w", req.Key, err)
	}
	var w awaiter
	for {
		fnErr = nil
		res, err := s.runOnce(ctx, req, ttl, fn, named, op)
		switch {
		case !s.await || err == nil || (fnErr != nil && errors.Is(err, fnErr)):
			// fn's own error is never waited on.
			return res, err
		case errors.Is(err, sqlonce.ErrInProgress):
			// WithAwaitResult: ask again after a pause.
			if err := w.wait(ctx, err); err != nil {
				return sqlonce.Result{}, err
			}
		case ctx.Err() != nil:
			return res, w.ended(err)
		default:
			return res, err
		}
	}
}

// runOnce is one attempt of runOwn.
func (s *Store[TTx]) runOnce(ctx context.Context, req Request, ttl time.Duration, fn func(ctx context.Context, tx TTx) ([]byte, error), named func(sqlonce.Result, error) (sqlonce.Result, error), op *obs.Op) (sqlonce.Result, error) {
	runner := s.caps.Runner
	if runner == nil {
		return named(s.runInTx(ctx, req, fn, op))
	}
	limited := func(ctx context.Context, tx TTx) ([]byte, error) {
		op.WorkStart()
		resp, err := fn(ctx, tx)
		op.WorkEnd()
		if err == nil && len(resp) > s.maxResponse {
			return nil, fmt.Errorf("%w: %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(resp), req.Key, s.maxResponse)
		}
		return resp, err
	}
	p := driver.RunParams{
		Key:         s.key(req.Scope, req.Key),
		Fingerprint: req.Fingerprint,
		TTL:         ttl,
		LockWait:    s.lockWait,
		Now:         testclock.Now(ctx),
		Favor:       s.favor,
		NoRecord:    s.noRecord,
	}
	var out driver.RunResult
	err := owntx.Retry(ctx, func() (err error) {
		out, err = runner.Run(ctx, p, limited)
		if !errors.Is(err, driver.ErrNoRun) {
			op.Tried(err)
		}
		return err
	})
	op.Decided()
	switch {
	case errors.Is(err, driver.ErrNoRun):
		return named(s.runInTx(ctx, req, fn, op))
	case err != nil:
		return named(ended(ctx, sqlonce.Result{}, err))
	case !out.Won:
		return existing(req, out.Existing)
	}
	if out.Takeover {
		op.Takeover()
	}
	resp := out.Response
	if resp == nil && !s.noRecord {
		resp = []byte{}
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
}

// ended finishes Run: an error that says fn committed or rolled back the
// transaction it was given matches sqlonce.ErrInvalidArgument. A driver
// may say so itself (driver.ErrTxEnded), or the transaction's next
// statement does (sql.ErrTxDone, pgx.ErrTxClosed). A transaction that ctx
// ended is not fn's doing: database/sql rolls it back then.
func ended(ctx context.Context, res sqlonce.Result, err error) (sqlonce.Result, error) {
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, driver.ErrTxEnded):
		return sqlonce.Result{}, fmt.Errorf("%w: %w", sqlonce.ErrInvalidArgument, err)
	case ctx.Err() == nil && driver.Classify(err).Has(driver.TxDone):
		return sqlonce.Result{}, fmt.Errorf("%w: %w (%w)", sqlonce.ErrInvalidArgument, driver.ErrTxEnded, err)
	}
	return sqlonce.Result{}, err
}

// runInTx is Run for drivers without a Runner: DoResponse in a transaction
// of the Store's own.
func (s *Store[TTx]) runInTx(ctx context.Context, req Request, fn func(ctx context.Context, tx TTx) ([]byte, error), op *obs.Op) (sqlonce.Result, error) {
	var res sqlonce.Result
	err := owntx.RunObserved(ctx, s.engine, op, func(ctx context.Context, tx TTx) (err error) {
		res, err = s.run(ctx, tx, req, func(ctx context.Context) ([]byte, error) { return fn(ctx, tx) }, !s.noRecord, op)
		return err
	})
	return ended(ctx, res, err)
}

// RunJSON is Run for a Go value, as DoJSON is DoResponse's: the first
// run's value is recorded as JSON (with the Store's Codec, see
// WithCodec), and a repeat gets it back decoded into a T, as DoJSON says.
func RunJSON[T, TTx any](ctx context.Context, s *Store[TTx], req Request, fn func(ctx context.Context, tx TTx) (T, error)) (T, sqlonce.Result, error) {
	var zero T
	op := obs.Start(s.observer, "dedupe", "RunJSON", req.Scope, req.Key)
	if fn == nil {
		err := fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
		op.End(ctx, sqlonce.Result{}, err)
		return zero, sqlonce.Result{}, err
	}
	var first T
	res, err := s.runOwn(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		first = v
		return s.codec.Marshal(v)
	}, &op)
	v, res, err := decoded(s.codec, req, res, err, first)
	err = op.End(ctx, res, err)
	return v, res, err
}
