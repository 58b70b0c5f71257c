package dedupe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// MaxBatch is the most keys DoBatch takes in one call.
const MaxBatch = driver.MaxBatch

// DoBatch is Do for many keys of one scope at once, for a consumer that
// applies a batch of messages in one transaction. In tx it claims every
// key of ids, then calls fn once with the keys that are new, in the order
// of ids, and only if there is at least one. fn applies exactly those; the
// claims commit or roll back with tx, together with whatever fn wrote
// through tx.
//
// It returns one Result per key of ids, in order: FirstRun for a key fn
// was given, AlreadyDone for a key an earlier transaction that committed
// had claimed, and for every repeat of a key within ids after its first.
// An AlreadyDone carries the key's recorded Response, if it has one (a
// key recorded by DoResponse or Run). A concurrent batch or Do sharing keys waits
// for the transaction that holds them, as Do does. Keys are claimed in
// sorted order, so that two batches take shared keys in one order; a
// deadlock with other writes is still possible, and retryable.
//
// Errors are Do's, for the batch as a whole: nothing is decided, roll tx
// back. sqlonce.ErrInProgress when any key is held by a lease, and
// sqlonce.ErrKeyReuse when any was recorded with a fingerprint (DoBatch
// claims keys without one); sqlonce.ErrInvalidArgument for more than
// MaxBatch keys. When fn returns an error, DoBatch undoes the claims and
// returns that error unchanged. A Store built WithNoWait or WithLockWait
// claims the keys one at a time, each with its bounded wait.
//
// The claims take a constant number of statements, whatever the number of
// keys (one or two, by driver: docs/drivers.md, Statements per call).
//
// An Observer attached to the driver gets one Event per call, its Outcome
// FirstRun when fn ran, and Rows the number of keys fn was given.
func (s *Store[TTx]) DoBatch(ctx context.Context, tx TTx, scope string, ids []string, fn func(ctx context.Context, fresh []string) error) (results []sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "DoBatch", scope, "")
	defer func() { err = op.EndBatch(ctx, results, err) }()
	return s.doBatch(ctx, tx, scope, ids, fn, &op)
}

func (s *Store[TTx]) doBatch(ctx context.Context, tx TTx, scope string, ids []string, fn func(ctx context.Context, fresh []string) error, op *obs.Op) ([]sqlonce.Result, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	if err := keys.CheckTx(tx); err != nil {
		return nil, err
	}
	sorted, err := batchKeys(scope, ids)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []sqlonce.Result{}, nil
	}
	p := s.batchParams(ctx, scope, sorted)
	claims, err := s.claimBatch(ctx, tx, p)
	if err != nil {
		return nil, err
	}
	return s.applyBatch(ctx, tx, p, ids, claims, fn, op, true)
}

// claimBatch claims p.Keys in tx in the driver's statements for a batch;
// without them (or with a bounded lock wait) every claim is undecided,
// and applyBatch claims each key alone.
func (s *Store[TTx]) claimBatch(ctx context.Context, tx TTx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	bc := s.caps.BatchClaimer
	if bc == nil || s.lockWait > 0 {
		return make([]driver.BatchClaim, len(p.Keys)), nil
	}
	claims, err := bc.ClaimBatch(ctx, tx, p)
	if err != nil {
		return nil, batchClaimError(p, err)
	}
	return claims, nil
}

func batchClaimError(p driver.BatchParams, err error) error {
	return fmt.Errorf("sqlonce/dedupe: claim a batch of %d keys in scope %q: %w", len(p.Keys), p.Scope, err)
}

// RunBatch is DoBatch in a transaction of the Store's own, on the driver's
// database handle, as Run is DoResponse in
// one: it claims every key of ids, calls fn with the transaction and the
// keys that are new, in the order of ids (not at all when there is none),
// and commits fn's writes and the claims together. Results and errors are
// DoBatch's; when fn returns an error the transaction rolls back and
// RunBatch returns that error unchanged. After a deadlock or a
// serialization failure RunBatch runs the transaction, and fn, again
// itself, a few times; fn may thus run more than once, and only the run
// that commits leaves anything behind.
//
// Through pgx on a *pgxpool.Pool or a *pgx.Conn, BEGIN travels with the
// claim of the whole batch: a batch whose fn sends one statement takes the
// bare transaction's three round trips, and a batch of keys all done
// before two. Elsewhere it takes DoBatch's statements between a BEGIN and
// a COMMIT of their own.
func (s *Store[TTx]) RunBatch(ctx context.Context, scope string, ids []string, fn func(ctx context.Context, tx TTx, fresh []string) error) (results []sqlonce.Result, err error) {
	if outer, ctx := obs.Take(ctx); outer != nil {
		// A package built on the Store (the inbox) observes the
		// operation as its own.
		return s.runBatch(ctx, scope, ids, fn, outer)
	}
	op := obs.Start(s.observer, "dedupe", "RunBatch", scope, "")
	defer func() { err = op.EndBatch(ctx, results, err) }()
	return s.runBatch(ctx, scope, ids, fn, &op)
}

func (s *Store[TTx]) runBatch(ctx context.Context, scope string, ids []string, fn func(ctx context.Context, tx TTx, fresh []string) error, op *obs.Op) ([]sqlonce.Result, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	sorted, err := batchKeys(scope, ids)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []sqlonce.Result{}, nil
	}
	var results []sqlonce.Result
	p := s.batchParams(ctx, scope, sorted)
	var fnErr error // the last error fn returned
	inner := fn
	fn = func(ctx context.Context, tx TTx, fresh []string) error {
		fnErr = inner(ctx, tx, fresh)
		return fnErr
	}
	// wrapped names the batch in an error of sqlonce's own statements
	// (BEGIN, COMMIT); fn's and those already naming it stay as they are.
	wrapped := func(err error) error {
		if err == nil || (fnErr != nil && errors.Is(err, fnErr)) || strings.HasPrefix(err.Error(), "sqlonce/dedupe: ") {
			return err
		}
		return fmt.Errorf("sqlonce/dedupe: run a batch of %d keys in scope %q: %w", len(p.Keys), p.Scope, err)
	}
	if br := s.caps.BatchRunner; br != nil && s.lockWait == 0 {
		err = owntx.Retry(ctx, func() error {
			claimed := false
			err := br.RunBatch(ctx, p, func(ctx context.Context, tx TTx, claims []driver.BatchClaim) (err error) {
				claimed = true
				results, err = s.applyBatch(ctx, tx, p, ids, claims, func(ctx context.Context, fresh []string) error { return fn(ctx, tx, fresh) }, op, false)
				return err
			})
			if errors.Is(err, driver.ErrNoRun) {
				return err
			}
			op.Tried(err)
			if err != nil && !claimed {
				return batchClaimError(p, err)
			}
			return err
		})
		if !errors.Is(err, driver.ErrNoRun) {
			return batchEnded(ctx, results, wrapped(err))
		}
	}
	// The driver's InTx: the claims in the Store's own transaction, which
	// a failure rolls back whole (no claims to undo).
	err = owntx.RunObserved(ctx, s.engine, op, func(ctx context.Context, tx TTx) error {
		claims, err := s.claimBatch(ctx, tx, p)
		if err != nil {
			return err
		}
		results, err = s.applyBatch(ctx, tx, p, ids, claims, func(ctx context.Context, fresh []string) error { return fn(ctx, tx, fresh) }, op, false)
		return err
	})
	return batchEnded(ctx, results, wrapped(err))
}

// batchEnded is ended for a batch's results.
func batchEnded(ctx context.Context, results []sqlonce.Result, err error) ([]sqlonce.Result, error) {
	if _, err = ended(ctx, sqlonce.Result{}, err); err != nil {
		return nil, err
	}
	return results, nil
}

// batchKeys checks a batch's scope and keys, and returns the keys
// distinct and sorted.
func batchKeys(scope string, ids []string) ([]string, error) {
	if len(ids) > MaxBatch {
		return nil, fmt.Errorf("%w: %d keys in a batch, more than %d", sqlonce.ErrInvalidArgument, len(ids), MaxBatch)
	}
	if err := keys.Check("scope", scope); err != nil {
		return nil, err
	}
	for _, k := range ids {
		if err := keys.Check("key", k); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	return slices.Compact(sorted), nil
}

func (s *Store[TTx]) batchParams(ctx context.Context, scope string, sorted []string) driver.BatchParams {
	return driver.BatchParams{Namespace: s.ns, Scope: scope, Keys: sorted, TTL: s.ttl, Now: testclock.Now(ctx)}
}

// applyBatch decides every key of p.Keys from claims (one per key, in
// order; an undecided one is claimed alone in tx) and calls fn with the
// keys won, in the order of ids. With unclaim, a failure deletes the
// claims won from tx, which the caller's transaction goes on with;
// without, the Store's own transaction rolls back anyway.
func (s *Store[TTx]) applyBatch(ctx context.Context, tx TTx, p driver.BatchParams, ids []string, claims []driver.BatchClaim, fn func(ctx context.Context, fresh []string) error, op *obs.Op, unclaim bool) ([]sqlonce.Result, error) {
	scope := p.Scope
	if len(claims) != len(p.Keys) {
		// A driver that answers for other keys than it was given has a
		// bug; what it claimed stays in tx, which the caller rolls back
		// on this error.
		return nil, fmt.Errorf("sqlonce/dedupe: claim a batch of %d keys in scope %q: the driver answered %d claims", len(p.Keys), scope, len(claims))
	}
	won := make(map[string]int64, len(p.Keys))
	done := make(map[string]sqlonce.Result, len(p.Keys))
	undo := func(cause error) {
		if !unclaim || driver.Classify(cause).Has(driver.TxRolledBack) {
			return
		}
		for k, token := range won {
			_ = s.engine.Unclaim(ctx, tx, s.key(scope, k), token)
		}
	}
	for i, k := range p.Keys {
		c := claims[i]
		if !c.Decided {
			var err error
			c.Claim, err = s.engine.Claim(ctx, tx, driver.ClaimParams{
				Key: s.key(scope, k), TTL: p.TTL, LockWait: s.lockWait, Now: p.Now,
			})
			if err != nil {
				undo(err)
				return nil, s.claimError(Request{Scope: scope, Key: k}, err)
			}
		}
		if c.Won {
			won[k] = c.Token
			continue
		}
		r, err := existing(Request{Scope: scope, Key: k}, c.Existing)
		if err != nil {
			undo(nil)
			return nil, err
		}
		done[k] = r
	}

	op.Decided()
	results := make([]sqlonce.Result, len(ids))
	var fresh []string
	given := make(map[string]bool, len(won))
	for i, k := range ids {
		results[i] = done[k]
		if _, ok := won[k]; ok {
			// A repeat within ids of a key fn is given.
			results[i] = sqlonce.Result{Outcome: sqlonce.AlreadyDone}
		}
		if _, ok := won[k]; ok && !given[k] {
			given[k] = true
			results[i] = sqlonce.Result{Outcome: sqlonce.FirstRun}
			fresh = append(fresh, k)
		}
	}
	if len(fresh) == 0 {
		return results, nil
	}
	op.Rows(int64(len(fresh)))
	op.WorkStart()
	err := fn(ctx, fresh)
	op.WorkEnd()
	if err != nil {
		undo(err)
		return nil, err
	}
	// A transaction that lost one claim lost them all: one is asked
	// (see driver.ClaimChecker).
	k := fresh[0]
	if err := driver.CheckClaim(ctx, s.caps.ClaimChecker, tx, s.key(scope, k), won[k]); err != nil {
		undo(err)
		return nil, fmt.Errorf("sqlonce/dedupe: batch in scope %q after the work: %w", scope, err)
	}
	return results, nil
}
