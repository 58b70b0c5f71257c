package dedupe

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// Lease is a key claimed for work that cannot run inside a database
// transaction: calling a payment provider, sending mail. While the lease
// holds, a duplicate gets sqlonce.ErrInProgress. Complete records the
// response (repeats then get AlreadyDone with it); Release lets the next
// claimer run the work. If the holder crashes, the lease lapses at its
// deadline and the next claimer takes the key over with a new Token.
type Lease struct {
	// Scope and Key name the claimed key.
	Scope, Key string
	// Token is the fencing token of this claim. Every claim of the key gets
	// a larger one, so a downstream system that remembers the largest token
	// it has seen can refuse a late writer. Complete, Release and Extend
	// with a token that is no longer current return sqlonce.ErrLeaseLost.
	Token int64

	ttl time.Duration
}

// Claim claims req's key in lease mode, in a short transaction of its own
// on the driver's database handle (sqlonce.ErrNoDB without one), holding it
// for d from the database's now. It returns:
//   - FirstRun and the Lease: do the work, then Complete or Release;
//   - AlreadyDone with the recorded response and a nil Lease: the work was
//     completed earlier;
//   - sqlonce.ErrInProgress: another holder's lease has not lapsed;
//   - sqlonce.ErrKeyReuse: the key was recorded with another fingerprint.
//
// A lease that lapsed, or was released, is taken over as FirstRun.
func (s *Store[TTx]) Claim(ctx context.Context, req Request, d time.Duration) (*Lease, sqlonce.Result, error) {
	var (
		l   *Lease
		res sqlonce.Result
	)
	err := s.engine.InTx(ctx, func(ctx context.Context, tx TTx) error {
		var err error
		l, res, err = s.ClaimTx(ctx, tx, req, d)
		return err
	})
	if err != nil {
		return nil, sqlonce.Result{}, err
	}
	return l, res, nil
}

// ClaimTx is Claim in the caller's transaction. The lease is visible to
// other callers only once tx commits: commit it before doing the work.
func (s *Store[TTx]) ClaimTx(ctx context.Context, tx TTx, req Request, d time.Duration) (*Lease, sqlonce.Result, error) {
	ttl, err := s.check(req)
	if err != nil {
		return nil, sqlonce.Result{}, err
	}
	if d <= 0 {
		return nil, sqlonce.Result{}, fmt.Errorf("%w: lease duration %v is not positive", sqlonce.ErrInvalidArgument, d)
	}
	c, err := s.engine.Claim(ctx, tx, driver.ClaimParams{
		Key:         driver.Key{Scope: req.Scope, Key: req.Key},
		Fingerprint: req.Fingerprint,
		TTL:         max(ttl, d),
		Lease:       d,
		LockWait:    s.lockWait,
		Now:         testclock.Now(ctx),
	})
	if err != nil {
		return nil, sqlonce.Result{}, s.claimError(req, err)
	}
	if !c.Won {
		res, err := existing(req, c.Existing)
		return nil, res, err
	}
	return &Lease{Scope: req.Scope, Key: req.Key, Token: c.Token, ttl: ttl}, sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
}

func (s *Store[TTx]) leaseTTL(l *Lease) time.Duration {
	if l.ttl > 0 {
		return l.ttl
	}
	return s.ttl
}

func checkLease(l *Lease) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", sqlonce.ErrInvalidArgument)
	}
	return nil
}

// Complete records response for the leased key, in a transaction of its
// own, and ends the lease: from then on the key is done and repeats get
// AlreadyDone with response until it expires (the Request's TTL, counted
// from now). It returns an error matching sqlonce.ErrLeaseLost when the
// lease's token is no longer current (another claimer took the key over
// after the lease lapsed, or it was completed or released already); nothing
// is changed then.
//
// A lease that lapsed but that nobody took over can still be completed: its
// token is still the current one.
func (s *Store[TTx]) Complete(ctx context.Context, l *Lease, response []byte) error {
	return s.engine.InTx(ctx, func(ctx context.Context, tx TTx) error {
		return s.CompleteTx(ctx, tx, l, response)
	})
}

// CompleteTx is Complete in the caller's transaction, so that the
// completion commits together with a write that records the work's result.
func (s *Store[TTx]) CompleteTx(ctx context.Context, tx TTx, l *Lease, response []byte) error {
	if err := checkLease(l); err != nil {
		return err
	}
	if len(response) > s.maxResponse {
		return fmt.Errorf("%w: %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(response), l.Key, s.maxResponse)
	}
	ok, err := s.engine.Complete(ctx, tx, driver.Key{Scope: l.Scope, Key: l.Key}, l.Token, response, s.leaseTTL(l), testclock.Now(ctx))
	return leaseResult("complete", l, ok, err)
}

// Release gives the lease up, in a transaction of its own, so that the next
// claimer runs the work (call it when the work failed in a way a retry can
// fix). It returns an error matching sqlonce.ErrLeaseLost when the token is
// no longer current.
func (s *Store[TTx]) Release(ctx context.Context, l *Lease) error {
	return s.engine.InTx(ctx, func(ctx context.Context, tx TTx) error {
		return s.ReleaseTx(ctx, tx, l)
	})
}

// ReleaseTx is Release in the caller's transaction.
func (s *Store[TTx]) ReleaseTx(ctx context.Context, tx TTx, l *Lease) error {
	if err := checkLease(l); err != nil {
		return err
	}
	ok, err := s.engine.Release(ctx, tx, driver.Key{Scope: l.Scope, Key: l.Key}, l.Token, testclock.Now(ctx))
	return leaseResult("release", l, ok, err)
}

// Extend moves a held lease's deadline to d from the database's now, for
// work that runs longer than planned. It returns an error matching
// sqlonce.ErrLeaseLost when the lease has lapsed or the token is no longer
// current: stop the work then, someone else may be doing it.
func (s *Store[TTx]) Extend(ctx context.Context, l *Lease, d time.Duration) error {
	return s.engine.InTx(ctx, func(ctx context.Context, tx TTx) error {
		return s.ExtendTx(ctx, tx, l, d)
	})
}

// ExtendTx is Extend in the caller's transaction.
func (s *Store[TTx]) ExtendTx(ctx context.Context, tx TTx, l *Lease, d time.Duration) error {
	if err := checkLease(l); err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("%w: lease duration %v is not positive", sqlonce.ErrInvalidArgument, d)
	}
	ok, err := s.engine.Extend(ctx, tx, driver.Key{Scope: l.Scope, Key: l.Key}, l.Token, d, testclock.Now(ctx))
	return leaseResult("extend", l, ok, err)
}

func leaseResult(op string, l *Lease, ok bool, err error) error {
	if err != nil {
		return fmt.Errorf("sqlonce/dedupe: %s lease on %q: %w", op, l.Key, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s: key %q in scope %q, token %d", sqlonce.ErrLeaseLost, op, l.Key, l.Scope, l.Token)
	}
	return nil
}
