package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// KeyRow is a key as Store.Run reads it.
type KeyRow struct {
	Fingerprint []byte
	Response    []byte
	Token       int64
	// Available: expired, or a lapsed lease; Run may take it over.
	Available bool
	// Leased: held by a live lease.
	Leased bool
}

func (r KeyRow) existing() RunResult {
	return RunResult{Existing: Existing{Fingerprint: r.Fingerprint, Response: r.Response, Leased: r.Leased}}
}

// SQLRunSteps are the statements of a database/sql driver's Store.Run
// (SQLRun), on the key of the Run they were made for.
type SQLRunSteps struct {
	// DB is the driver's handle; Run's transaction is begun on it.
	DB *sql.DB
	// Stale is sqlonce.ErrStaleRead, which this package cannot import:
	// the error SQLRun wraps when another transaction recorded the key.
	Stale error
	// Begin begins Run's transaction (nil: the server's default options).
	Begin *sql.TxOptions
	// Lookup reads the key outside any transaction: the committed row, if
	// there is one.
	Lookup func(ctx context.Context) (KeyRow, bool, error)
	// Record inserts the key, done, with response in tx. It reports
	// false, and no error, when the key exists already (recorded by
	// another transaction, which it waited for if that one was still
	// open), leaving tx usable.
	Record func(ctx context.Context, tx *sql.Tx, response []byte) (bool, error)
	// Current reads the key in tx after Record found it, seeing the row
	// committed last (a locking read under REPEATABLE READ).
	Current func(ctx context.Context, tx *sql.Tx) (KeyRow, bool, error)
	// Replace records the key, done, with response in tx in place of the
	// row read with token, if that row is still available (an expired key,
	// a lapsed lease), and reports whether it did. A row that changed
	// since (taken over, completed late by its lease holder) stays.
	Replace func(ctx context.Context, tx *sql.Tx, token int64, response []byte) (bool, error)
}

// errExists ends a FavorFirstRuns transaction whose key another one
// recorded: it rolls fn's work back.
var errExists = errors.New("driver: the key is recorded")

// currentAttempts bounds SQLRun's loop for a key that vanishes (purged)
// between the Record that found it and the read of it.
const currentAttempts = 3

// SQLRun is Runner.Run for drivers on database/sql, which send one
// statement per round trip. With p.Favor FavorFirstRuns it reads nothing
// before fn: BEGIN, fn, the key recorded, COMMIT; a key found at the
// record is read in the transaction, taken over if it is available, and
// otherwise answered from after rolling fn's work back. Otherwise the key
// is read first, outside any transaction, and a repeat ends there; a
// first run then records the key after fn, and a key recorded meanwhile
// by another transaction fails with sqlonce.ErrStaleRead (Store.Run starts
// over and reads it). Either way nothing holds the key while fn runs: a
// concurrent Run of a new key runs fn too, and waits at its record for the
// first to end.
//
// fn may fail because a run of the same key committed while it ran: its
// work collides with the first run's (a unique order code, say), and the
// error reaches fn before Run reaches the record. When fn fails, SQLRun
// reads the key again after the rollback, and answers from a key that is
// now recorded instead of returning fn's error: the repeat gets the first
// run's answer, as it would have had it come later.
func SQLRun(ctx context.Context, p RunParams, s SQLRunSteps, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (RunResult, error) {
	var fnFailed bool
	watched := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		resp, err := fn(ctx, tx)
		fnFailed = err != nil
		return resp, err
	}
	res, err := sqlRun(ctx, p, s, watched)
	if err == nil || !fnFailed || ctx.Err() != nil {
		return res, err
	}
	row, found, lErr := s.Lookup(ctx)
	if lErr != nil || !found || row.Available {
		return res, err
	}
	return row.existing(), nil
}

func sqlRun(ctx context.Context, p RunParams, s SQLRunSteps, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (RunResult, error) {
	if p.Favor == FavorFirstRuns {
		return sqlRunWorkFirst(ctx, p, s, fn)
	}
	row, found, err := s.Lookup(ctx)
	if err != nil {
		return RunResult{}, err
	}
	if found && !row.Available {
		return row.existing(), nil
	}
	var res RunResult
	err = sqlRunTx(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		resp, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		record := s.Record
		if found {
			record = func(ctx context.Context, tx *sql.Tx, resp []byte) (bool, error) {
				return s.Replace(ctx, tx, row.Token, resp)
			}
		}
		ok, err := record(ctx, tx, resp)
		if err != nil {
			return err
		}
		if !ok {
			return staleRun(p, s.Stale)
		}
		res = RunResult{Won: true, Response: resp, Takeover: found}
		return nil
	})
	return res, err
}

func sqlRunWorkFirst(ctx context.Context, p RunParams, s SQLRunSteps, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (RunResult, error) {
	var res RunResult
	err := sqlRunTx(ctx, s, func(ctx context.Context, tx *sql.Tx) error {
		resp, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		for range currentAttempts {
			ok, err := s.Record(ctx, tx, resp)
			if err != nil {
				return err
			}
			if ok {
				res = RunResult{Won: true, Response: resp}
				return nil
			}
			row, found, err := s.Current(ctx, tx)
			if err != nil {
				return err
			}
			if !found {
				continue // purged since the record found it: record again
			}
			if !row.Available {
				res = row.existing()
				return errExists
			}
			ok, err = s.Replace(ctx, tx, row.Token, resp)
			if err != nil {
				return err
			}
			if !ok {
				return staleRun(p, s.Stale)
			}
			res = RunResult{Won: true, Response: resp, Takeover: true}
			return nil
		}
		return fmt.Errorf("%w: key changed %d times while being recorded", s.Stale, currentAttempts)
	})
	if errors.Is(err, errExists) {
		return res, nil
	}
	return res, err
}

func sqlRunTx(ctx context.Context, s SQLRunSteps, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if s.Begin == nil {
		return SQLInTx(ctx, s.DB, fn)
	}
	return SQLInTxWith(ctx, s.DB, s.Begin, fn)
}

func staleRun(p RunParams, stale error) error {
	return fmt.Errorf("%w: key %q in scope %q was recorded by another transaction", stale, p.Key.Key, p.Scope)
}
