package dedupe

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// Lease is a key claimed in lease mode, for work that cannot run inside the
// transaction that records the key: calling a payment provider, sending
// mail, writing to another system.
//
// No transaction spans the work, so the guarantee is weaker than Do's: at
// most one holder at a time, and a recorded response once the work is
// completed. Claim commits the key as leased until a deadline; do the
// work; Complete records the response (repeats then get AlreadyDone with
// it), or Release lets the next claimer run the work. While the lease
// holds, duplicates get sqlonce.ErrInProgress. A holder that crashes
// leaves the lease to lapse at its deadline, and the next claimer runs the
// work again: give the outside system an idempotency key made from Scope
// and Key (e.g. StepKey(l.Scope, l.Key, "charge"); the Key alone is shared
// by other scopes, and Token changes with every claim). Choose a lease longer than the work and Extend it for work that
// runs long. The package documentation compares the modes.
//
// # Fencing
//
// Every claim of a key gets a larger Token than the claims before it, also
// after the key expired and was purged: tokens start from the database
// clock in microseconds, so this holds as long as that clock does not step
// back across a purge. Complete, Release and Extend succeed only with
// the current token: once the key was taken over, completed or released,
// they return an error matching sqlonce.ErrLeaseLost and change nothing.
// A lease that lapsed but that nobody took over still holds its token, so
// a holder that overran its deadline can still Complete or Extend it,
// until the key expires and is purged. Hand Token to downstream systems
// that can refuse a write older than the largest token they have seen.
//
// Deadlines and expiry are counted from the database's now. On PostgreSQL
// that is the start of the transaction: ClaimTx late in a long transaction
// gets a lease that ends early.
//
// A Lease can be rebuilt from its exported fields, for example by a worker
// that stored them; Complete then records the key with the Store's TTL
// rather than the claiming Request's.
type Lease struct {
	// Scope and Key name the claimed key.
	Scope, Key string
	// Token is the fencing token of this claim.
	Token int64

	ttl time.Duration
}

// Claim claims req's key in lease mode for d on the driver's database
// handle and commits it, so that other
// callers see the lease at once: its statements in autocommit (each
// decides alone) where the driver can, as Complete says; with
// WithLockWait, and where the driver cannot, in a short transaction of its
// own. It returns:
//   - FirstRun and the Lease: do the work, then Complete or Release;
//   - AlreadyDone with the recorded response and a nil Lease: the work was
//     completed earlier (by a lease, or by Do in a transaction);
//   - sqlonce.ErrInProgress: another holder's lease has not lapsed, or
//     (WithNoWait, WithLockWait) another transaction holds the key;
//   - sqlonce.ErrKeyReuse: the key was recorded with another fingerprint;
//   - sqlonce.ErrInvalidKey, sqlonce.ErrInvalidArgument: bad input (d must
//     be at least a microsecond), no SQL run.
//
// A key that expired, a lease that lapsed and a released lease are taken
// over as FirstRun with a larger Token. The key lives for the Request's
// TTL (the Store's by default) from the claim, and at least until the
// lease's deadline.
//
// Claim retries its transaction itself after a deadlock or a serialization
// failure. [WithinDeadline] bounds the lease by ctx's deadline. A ctx
// that ends before the claim commits leaves no lease; one that ends while
// it commits may leave one the caller got no Lease for, which lapses at
// its deadline.
func (s *Store[TTx]) Claim(ctx context.Context, req Request, d time.Duration, opts ...ClaimOption) (l *Lease, res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "Claim", req.Scope, req.Key)
	defer func() { err = op.End(ctx, res, err) }()
	if d, err = leaseFor(ctx, d, opts); err != nil {
		return nil, sqlonce.Result{}, err
	}
	if _, err := s.checkClaim(req, d); err != nil {
		return nil, sqlonce.Result{}, err
	}
	// The claim's statements each decide alone (an insert, or a takeover
	// conditional on the key being still available): on PostgreSQL they
	// run in autocommit, one round trip, with no BEGIN and COMMIT around
	// them. A bounded wait needs a transaction (a savepoint and its
	// lock_timeout).
	auto := s.caps.Autocommitter
	if s.lockWait > 0 {
		auto = nil
	}
	err = owntx.RunStatements(ctx, s.engine, auto, &op, func(ctx context.Context, tx TTx) error {
		var err error
		l, res, err = s.claimTx(ctx, tx, req, d, &op)
		return err
	})
	if err != nil {
		return nil, sqlonce.Result{}, err
	}
	return l, res, nil
}

// ClaimTx is Claim in the caller's transaction. The lease is visible to
// other callers only once tx commits: commit it before doing the work. It
// needs no database handle on the driver.
func (s *Store[TTx]) ClaimTx(ctx context.Context, tx TTx, req Request, d time.Duration, opts ...ClaimOption) (l *Lease, res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "ClaimTx", req.Scope, req.Key)
	defer func() { err = op.End(ctx, res, err) }()
	if d, err = leaseFor(ctx, d, opts); err != nil {
		return nil, sqlonce.Result{}, err
	}
	return s.claimTx(ctx, tx, req, d, &op)
}

// ClaimOption adjusts one Claim or ClaimTx.
type ClaimOption func(*claimOptions) error

type claimOptions struct {
	deadline bool
	margin   time.Duration
}

// WithinDeadline bounds the lease by the caller's deadline: when ctx has
// one (ctx.Deadline()), the lease lasts at most until that deadline plus
// margin, and for the duration asked for when that is shorter. A caller
// that gives up at its deadline (a client's timeout, a serverless
// function's time limit) then leaves a lease that lapses soon after, not
// one that keeps its retries out for the whole duration: Powertools'
// register_lambda_context. The margin covers the time the holder may
// still spend after its deadline (its own cleanup, an outside call in
// flight); 0 ends the lease with the deadline. Without a deadline on ctx
// the option changes nothing. A negative margin is an error
// (sqlonce.ErrInvalidArgument).
//
// The time left is measured on the program's clock (time.Until), and
// the lease's deadline is set, as always, on the database's: now there
// plus the time left plus margin. Extend takes a duration of its own.
func WithinDeadline(margin time.Duration) ClaimOption {
	return func(o *claimOptions) error {
		if margin < 0 {
			return fmt.Errorf("%w: deadline margin %v is negative", sqlonce.ErrInvalidArgument, margin)
		}
		o.deadline, o.margin = true, margin
		return nil
	}
}

// leaseFor returns the lease a claim takes: d, bounded as opts say.
func leaseFor(ctx context.Context, d time.Duration, opts []ClaimOption) (time.Duration, error) {
	var o claimOptions
	for i, opt := range opts {
		if opt == nil {
			return 0, fmt.Errorf("%w: claim option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return 0, err
		}
	}
	if err := checkDuration(d); err != nil || !o.deadline {
		return d, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return d, nil
	}
	if left := time.Until(dl) + o.margin; left < d {
		if left < time.Microsecond {
			// The deadline and its margin are past: the claim would
			// lapse as it starts.
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("%w: the deadline plus the margin (%v) has passed", context.DeadlineExceeded, o.margin)
		}
		d = left
	}
	return d, nil
}

func (s *Store[TTx]) claimTx(ctx context.Context, tx TTx, req Request, d time.Duration, op *obs.Op) (*Lease, sqlonce.Result, error) {
	if err := keys.CheckTx(tx); err != nil {
		return nil, sqlonce.Result{}, err
	}
	ttl, err := s.checkClaim(req, d)
	if err != nil {
		return nil, sqlonce.Result{}, err
	}
	c, err := s.engine.Claim(ctx, tx, driver.ClaimParams{
		Key:         s.key(req.Scope, req.Key),
		Fingerprint: req.Fingerprint,
		TTL:         max(ttl, d), // keeps locked_until <= expires_at
		Lease:       d,
		LockWait:    s.lockWait,
		Now:         testclock.Now(ctx),
	})
	op.Decided()
	if err != nil {
		return nil, sqlonce.Result{}, s.claimError(req, err)
	}
	if !c.Won {
		res, err := existing(req, c.Existing)
		return nil, res, err
	}
	if c.Takeover {
		op.Takeover()
	}
	return &Lease{Scope: req.Scope, Key: req.Key, Token: c.Token, ttl: ttl}, sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
}

func (s *Store[TTx]) checkClaim(req Request, d time.Duration) (time.Duration, error) {
	ttl, err := s.check(req)
	if err != nil {
		return 0, err
	}
	if err := checkDuration(d); err != nil {
		return 0, err
	}
	return ttl, nil
}

// checkDuration refuses lease durations the database cannot represent:
// it counts in microseconds, and a lease of 0 µs would lapse as it starts.
func checkDuration(d time.Duration) error {
	if d < time.Microsecond {
		return fmt.Errorf("%w: lease duration %v is shorter than 1µs", sqlonce.ErrInvalidArgument, d)
	}
	return nil
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

func (s *Store[TTx]) checkComplete(l *Lease, response []byte) error {
	if err := checkLease(l); err != nil {
		return err
	}
	if len(response) > s.maxResponse {
		return fmt.Errorf("%w: %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(response), l.Key, s.maxResponse)
	}
	return nil
}

// Complete records response for the leased key and ends the lease, in one
// statement committed on its own: in autocommit, one round trip, where the driver can (pgxdriver,
// pgsqldriver, mysqldriver on MySQL/MariaDB and on Galera at
// wsrep_sync_wait=3, sqlitedriver), in a transaction of its own where it
// cannot (pgsqldriver through lib/pq, a Galera node at wsrep_sync_wait=1).
// From
// then on repeats get AlreadyDone with response (a nil response is
// recorded as empty) until the key expires, the Request's TTL from now.
//
// It returns an error matching sqlonce.ErrLeaseLost, and changes nothing,
// when the lease's token is no longer current: another claimer took the
// key over, or the lease was completed or released already, or the key
// expired and was purged. A lease that lapsed but that nobody took over
// can still be completed. A response over the Store's limit returns
// sqlonce.ErrResponseTooLarge before any SQL runs.
//
// A ctx that ends before Complete commits returns ctx's error and leaves
// the lease held until its deadline, as if Complete had not been called:
// the work is done, so complete it again with a context that has not
// ended (context.WithoutCancel(ctx)), as httpidem's lease mode does.
func (s *Store[TTx]) Complete(ctx context.Context, l *Lease, response []byte) (err error) {
	op := obs.Start(s.observer, "dedupe", "Complete", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	if err := s.checkComplete(l, response); err != nil {
		return err
	}
	// One statement: in autocommit where the driver can (PostgreSQL).
	return owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &op, func(ctx context.Context, tx TTx) error {
		return s.completeTx(ctx, tx, l, response)
	})
}

// CompleteTx is Complete in the caller's transaction, so that the
// completion commits together with a write that records the work's result,
// or rolls back with it, leaving the lease held.
func (s *Store[TTx]) CompleteTx(ctx context.Context, tx TTx, l *Lease, response []byte) (err error) {
	op := obs.Start(s.observer, "dedupe", "CompleteTx", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	return s.completeTx(ctx, tx, l, response)
}

func (s *Store[TTx]) completeTx(ctx context.Context, tx TTx, l *Lease, response []byte) error {
	if err := keys.CheckTx(tx); err != nil {
		return err
	}
	if err := s.checkComplete(l, response); err != nil {
		return err
	}
	ok, err := s.engine.Complete(ctx, tx, s.key(l.Scope, l.Key), l.Token, response, s.leaseTTL(l), testclock.Now(ctx))
	return leaseResult("complete", l, ok, err)
}

// Release gives the lease up, committed on its own as Complete is, so that the
// next claimer runs the work at once rather than at the deadline: call it
// when the work failed in a way a retry can fix, and did nothing a retry
// must not repeat. The token is spent: the releaser can neither complete
// nor extend it afterwards. It returns an error matching
// sqlonce.ErrLeaseLost, and changes nothing, when the token is no longer
// current. A ctx that ends before it commits leaves the lease held until
// its deadline: release with a context that has not ended.
func (s *Store[TTx]) Release(ctx context.Context, l *Lease) (err error) {
	op := obs.Start(s.observer, "dedupe", "Release", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	if err := checkLease(l); err != nil {
		return err
	}
	return owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &op, func(ctx context.Context, tx TTx) error {
		return s.releaseTx(ctx, tx, l)
	})
}

// ReleaseTx is Release in the caller's transaction.
func (s *Store[TTx]) ReleaseTx(ctx context.Context, tx TTx, l *Lease) (err error) {
	op := obs.Start(s.observer, "dedupe", "ReleaseTx", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	return s.releaseTx(ctx, tx, l)
}

func (s *Store[TTx]) releaseTx(ctx context.Context, tx TTx, l *Lease) error {
	if err := keys.CheckTx(tx); err != nil {
		return err
	}
	if err := checkLease(l); err != nil {
		return err
	}
	ok, err := s.engine.Release(ctx, tx, s.key(l.Scope, l.Key), l.Token, testclock.Now(ctx))
	return leaseResult("release", l, ok, err)
}

// Extend moves the lease's deadline to d from the database's now (earlier
// or later), committed on its own as Complete is, for work that runs longer than
// planned; the key's expiry moves along when it would come first. A lease
// that lapsed but that nobody took over is held again. It returns an error
// matching sqlonce.ErrLeaseLost, and changes nothing, when the token is no
// longer current: stop the work then, someone else may be doing it. d must
// be at least a microsecond.
func (s *Store[TTx]) Extend(ctx context.Context, l *Lease, d time.Duration) (err error) {
	op := obs.Start(s.observer, "dedupe", "Extend", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	if err := checkLease(l); err != nil {
		return err
	}
	if err := checkDuration(d); err != nil {
		return err
	}
	return owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &op, func(ctx context.Context, tx TTx) error {
		return s.extendTx(ctx, tx, l, d)
	})
}

// ExtendTx is Extend in the caller's transaction.
func (s *Store[TTx]) ExtendTx(ctx context.Context, tx TTx, l *Lease, d time.Duration) (err error) {
	op := obs.Start(s.observer, "dedupe", "ExtendTx", leaseScope(l), leaseKey(l))
	defer func() { err = op.Done(ctx, err) }()
	return s.extendTx(ctx, tx, l, d)
}

func (s *Store[TTx]) extendTx(ctx context.Context, tx TTx, l *Lease, d time.Duration) error {
	if err := keys.CheckTx(tx); err != nil {
		return err
	}
	if err := checkLease(l); err != nil {
		return err
	}
	if err := checkDuration(d); err != nil {
		return err
	}
	ok, err := s.engine.Extend(ctx, tx, s.key(l.Scope, l.Key), l.Token, d, testclock.Now(ctx))
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

// leaseScope and leaseKey are l's for an Event; a nil l is refused later.
func leaseScope(l *Lease) string {
	if l == nil {
		return ""
	}
	return l.Scope
}

func leaseKey(l *Lease) string {
	if l == nil {
		return ""
	}
	return l.Key
}
