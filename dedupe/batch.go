package dedupe

import (
	"context"
	"fmt"
	"slices"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
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
// keys: one on PostgreSQL; two on MySQL/MariaDB; on SQLite one, and a
// second that reads the keys that existed when there are any.
//
// An Observer attached to the driver gets one Event per call, its Outcome
// FirstRun when fn ran, and Rows the number of keys fn was given.
func (s *Store[TTx]) DoBatch(ctx context.Context, tx TTx, scope string, ids []string, fn func(ctx context.Context, fresh []string) error) (results []sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "DoBatch", scope, "")
	defer func() { op.EndBatch(ctx, results, err) }()
	return s.doBatch(ctx, tx, scope, ids, fn, &op)
}

func (s *Store[TTx]) doBatch(ctx context.Context, tx TTx, scope string, ids []string, fn func(ctx context.Context, fresh []string) error, op *obs.Op) ([]sqlonce.Result, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	if err := keys.CheckTx(tx); err != nil {
		return nil, err
	}
	if len(ids) > MaxBatch {
		return nil, fmt.Errorf("%w: %d keys in a batch, more than %d", sqlonce.ErrInvalidArgument, len(ids), MaxBatch)
	}
	if err := keys.Check("scope", scope); err != nil {
		return nil, err
	}
	ttl := s.ttl
	for _, k := range ids {
		if err := keys.Check("key", k); err != nil {
			return nil, err
		}
	}
	if len(ids) == 0 {
		return []sqlonce.Result{}, nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)

	now := testclock.Now(ctx)
	claims := make([]driver.BatchClaim, len(sorted))
	if bc, ok := s.engine.(driver.BatchClaimer[TTx]); ok && s.lockWait == 0 {
		var err error
		claims, err = bc.ClaimBatch(ctx, tx, driver.BatchParams{Namespace: s.ns, Scope: scope, Keys: sorted, TTL: ttl, Now: now})
		if err != nil {
			return nil, fmt.Errorf("sqlonce/dedupe: claim a batch of %d keys in scope %q: %w", len(sorted), scope, err)
		}
		if len(claims) != len(sorted) {
			// A driver that answers for other keys than it was given
			// has a bug; what it claimed stays in tx, which the caller
			// rolls back on this error.
			return nil, fmt.Errorf("sqlonce/dedupe: claim a batch of %d keys in scope %q: the driver answered %d claims", len(sorted), scope, len(claims))
		}
	}
	won := make(map[string]int64, len(sorted))
	done := make(map[string]sqlonce.Result, len(sorted))
	unclaim := func(cause error) {
		if driver.Classify(cause).Has(driver.TxRolledBack) {
			return
		}
		for k, token := range won {
			_ = s.engine.Unclaim(ctx, tx, s.key(scope, k), token)
		}
	}
	for i, k := range sorted {
		c := claims[i]
		if !c.Decided {
			var err error
			c.Claim, err = s.engine.Claim(ctx, tx, driver.ClaimParams{
				Key: s.key(scope, k), TTL: ttl, LockWait: s.lockWait, Now: now,
			})
			if err != nil {
				unclaim(err)
				return nil, s.claimError(Request{Scope: scope, Key: k}, err)
			}
		}
		if c.Won {
			won[k] = c.Token
			continue
		}
		r, err := existing(Request{Scope: scope, Key: k}, c.Existing)
		if err != nil {
			unclaim(nil)
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
		unclaim(err)
		return nil, err
	}
	return results, nil
}
