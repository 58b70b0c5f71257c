package dedupe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/storecfg"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

const (
	// DefaultTTL is how long a key lives when neither the Store nor the
	// Request sets a TTL: 24 hours, as Stripe keeps its idempotency keys.
	DefaultTTL = 24 * time.Hour

	// DefaultMaxResponseSize is the largest response a Store records unless
	// WithMaxResponseSize says otherwise: 64 KiB.
	DefaultMaxResponseSize = 64 << 10

	// MaxResponseSize is the largest limit WithMaxResponseSize accepts:
	// 16 MiB - 1, what a MySQL MEDIUMBLOB holds. Large responses travel in
	// every replay; store a reference to them instead.
	MaxResponseSize = 16<<20 - 1

	// DefaultPurgeBatch is the batch size Purge uses for a batch of 0.
	DefaultPurgeBatch = 1000
)

// Store claims idempotency keys in the sqlonce_keys table through a
// driver. It is safe for concurrent use; create one per configuration and
// share it.
type Store[TTx any] struct {
	engine      driver.Engine[TTx]
	caps        driver.Capabilities[TTx]
	ns          driver.Namespace
	stepsNS     driver.Namespace // the keys of RunSteps
	ttl         time.Duration
	maxResponse int
	lockWait    time.Duration
	await       bool
	favor       driver.Favor
	noRecord    bool
	observer    sqlonce.Observer
	codec       Codec
}

// Option configures a Store; New applies the options in order and
// returns the first one's error. The options are this package's With
// functions (storecfg.Options is internal: the packages built on a Store
// set fields of it that no user of dedupe can).
type Option func(*storecfg.Options) error

// WithTTL sets how long keys live after they are recorded (DefaultTTL
// otherwise, and for 0; negative is sqlonce.ErrInvalidArgument). A
// Request's own TTL overrides it. An expired key counts as absent: the
// next claim takes it over.
func WithTTL(ttl time.Duration) Option {
	return func(o *storecfg.Options) error {
		switch {
		case ttl < 0:
			return fmt.Errorf("%w: TTL %v is negative", sqlonce.ErrInvalidArgument, ttl)
		case ttl == 0:
			ttl = DefaultTTL
		}
		o.TTL = ttl
		return nil
	}
}

// WithMaxResponseSize sets the largest response, in bytes, the Store
// records: DefaultMaxResponseSize otherwise, and for 0; at most
// MaxResponseSize (sqlonce.ErrInvalidArgument above it or below 0).
func WithMaxResponseSize(n int) Option {
	return func(o *storecfg.Options) error {
		switch {
		case n < 0 || n > MaxResponseSize:
			return fmt.Errorf("%w: max response size %d is outside 0..%d", sqlonce.ErrInvalidArgument, n, MaxResponseSize)
		case n == 0:
			n = DefaultMaxResponseSize
		}
		o.MaxResponseSize = n
		return nil
	}
}

// WithNoWait makes a claim that finds the key held by another, still open
// transaction return an error matching sqlonce.ErrInProgress at once
// instead of waiting for that transaction to end: use it where a
// duplicate should be told "in progress" (an HTTP 409 to a double click).
// Only the claim is undone: the caller's transaction stays usable, and
// sqlonce.IsRetryable reports false for the error. A claim held up by a
// lock other than the key's (a DDL statement on PostgreSQL) is tried
// again for up to 2 seconds, then fails with a retryable error that is no
// ErrInProgress; if ctx ends first, the error is ctx's.
//
// Without it a duplicate waits for the holder's transaction, then gets
// AlreadyDone or runs the work, which suits a message consumer. What a
// bound means on each database (it has no effect on SQLite, sees a key
// held on its own node only on Galera, and is refused through a sharded
// Vitess keyspace):
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#lock-waits-withnowait-and-withlockwait
func WithNoWait() Option { return WithLockWait(time.Millisecond) }

// WithLockWait is WithNoWait with a bounded wait: a claim waits at most d
// for another transaction holding the key, then returns an error matching
// sqlonce.ErrInProgress; if the holder rolls back within d, the claim is
// won. On MySQL/MariaDB d is counted in whole seconds, rounded down (below
// one second it is WithNoWait). 0 waits not at all: it is WithNoWait.
// Negative is sqlonce.ErrInvalidArgument.
func WithLockWait(d time.Duration) Option {
	return func(o *storecfg.Options) error {
		switch {
		case d < 0:
			return fmt.Errorf("%w: lock wait %v is negative", sqlonce.ErrInvalidArgument, d)
		case d == 0:
			// A lock timeout of 0 means "no timeout" to PostgreSQL.
			d = time.Millisecond
		}
		o.LockWait = d
		return nil
	}
}

// New returns a Store on the given driver. It returns an error matching
// sqlonce.ErrInvalidArgument for a nil driver or one not built by its
// package's New (a zero Driver), or an invalid option.
func New[TTx any](d sqlonce.Driver[TTx], opts ...Option) (*Store[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: dedupe: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	o := storecfg.Options{StepsNamespace: driver.NamespaceSteps, TTL: DefaultTTL, MaxResponseSize: DefaultMaxResponseSize, Codec: jsonCodec{}}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	e := d.Engine()
	return &Store[TTx]{engine: e, caps: e.Capabilities(), ns: o.Namespace,
		stepsNS: o.StepsNamespace, ttl: o.TTL, maxResponse: o.MaxResponseSize, lockWait: o.LockWait, await: o.AwaitResult, favor: o.Favor, noRecord: o.NoRecord, observer: obs.Of(d), codec: o.Codec}, nil
}

// stepsKey names a row of the namespace of the Store's operations of
// several steps.
func (s *Store[TTx]) stepsKey(scope, key string) driver.Key {
	return driver.Key{Namespace: s.stepsNS, Scope: scope, Key: key}
}

// key names a row of the Store's namespace.
func (s *Store[TTx]) key(scope, key string) driver.Key {
	return driver.Key{Namespace: s.ns, Scope: scope, Key: key}
}

// Request names the operation to run once.
type Request struct {
	// Scope is the namespace of the key: a tenant, a consumer name, the
	// authenticated caller's id. Keys are unique per scope, so one scope can
	// neither collide with nor read another's keys. Required.
	Scope string
	// Key is the idempotency key within the scope: an Idempotency-Key
	// header, a message id, a caller's serial number. Required. Compared
	// byte for byte; at most sqlonce.MaxKeyLen bytes of UTF-8.
	Key string
	// Fingerprint identifies the request's content (see Fingerprint). A key
	// presented again with a different fingerprint is refused with
	// sqlonce.ErrKeyReuse. Empty matches only empty. At most
	// sqlonce.MaxFingerprintLen bytes.
	Fingerprint []byte
	// TTL overrides the Store's TTL for this key. Zero uses the Store's;
	// negative is sqlonce.ErrInvalidArgument.
	TTL time.Duration
}

func (s *Store[TTx]) check(req Request) (time.Duration, error) {
	if err := keys.Check("scope", req.Scope); err != nil {
		return 0, err
	}
	if err := keys.Check("key", req.Key); err != nil {
		return 0, err
	}
	if len(req.Fingerprint) > sqlonce.MaxFingerprintLen {
		return 0, fmt.Errorf("%w: fingerprint is %d bytes, longer than %d", sqlonce.ErrInvalidKey, len(req.Fingerprint), sqlonce.MaxFingerprintLen)
	}
	switch {
	case req.TTL < 0:
		return 0, fmt.Errorf("%w: TTL %v is negative", sqlonce.ErrInvalidArgument, req.TTL)
	case req.TTL == 0:
		return s.ttl, nil
	}
	return req.TTL, nil
}

// Do runs fn once per key. In tx it claims req's key and, if the claim is
// won, runs fn; the claim commits or rolls back with tx, together with
// whatever fn wrote through tx.
//
// It returns FirstRun when fn ran, AlreadyDone when an earlier transaction
// that committed had claimed the key. A concurrent call with the same key
// waits until the transaction holding the key ends (unless the Store was
// built WithNoWait or WithLockWait), then returns AlreadyDone if that
// transaction committed, or runs fn if it rolled back.
//
// The same key twice in one transaction: the second call sees the claim
// the first made in tx and returns AlreadyDone (with the first's response,
// for DoResponse) without running fn, as a later transaction would. It
// neither waits on its own transaction nor reports ErrInProgress. If the
// first call's fn failed, its claim was undone and the second runs fn. A
// lease claimed in tx (ClaimTx) is in progress to a Do in the same tx.
//
// When fn returns an error, Do undoes the claim and returns that error
// unchanged; roll tx back. Errors:
//   - sqlonce.ErrInvalidKey, sqlonce.ErrInvalidArgument: bad input (a nil
//     tx among it), no SQL run;
//   - sqlonce.ErrKeyReuse: the key was recorded with another fingerprint;
//   - sqlonce.ErrInProgress: the key is held by a lease, or by another
//     transaction and the Store does not wait;
//   - an error for which sqlonce.IsRetryable is true: roll back and retry
//     (REPEATABLE READ and SERIALIZABLE on PostgreSQL report a duplicate
//     that committed after the snapshot this way; MySQL may deadlock).
//
// The library never commits or rolls back tx.
func (s *Store[TTx]) Do(ctx context.Context, tx TTx, req Request, fn func(ctx context.Context) error) (res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "Do", req.Scope, req.Key)
	defer func() { err = op.End(ctx, res, err) }()
	if fn == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	return s.run(ctx, tx, req, func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) }, false, &op)
}

// DoResponse is Do for operations whose answer a repeat must get back
// (idempotency proper). fn returns the response; it is recorded with the
// key in tx, and every later AlreadyDone carries it in Result.Response,
// byte for byte. On FirstRun Result.Response is what fn returned; a nil
// response is recorded as empty, and returned as a non-nil, empty slice,
// first and on every replay (see sqlonce.Result.Response).
//
// A response longer than the Store's limit, or than a MySQL server's
// max_allowed_packet, returns an error matching sqlonce.ErrResponseTooLarge
// after undoing the claim; roll tx back.
func (s *Store[TTx]) DoResponse(ctx context.Context, tx TTx, req Request, fn func(ctx context.Context) ([]byte, error)) (res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "dedupe", "DoResponse", req.Scope, req.Key)
	defer func() { err = op.End(ctx, res, err) }()
	if fn == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	return s.run(ctx, tx, req, fn, true, &op)
}

// DoJSON is DoResponse for a Go value: the first run's value is recorded as
// JSON (with the Store's Codec, see WithCodec), and a repeat gets it back
// decoded into a T. On FirstRun it returns fn's value as fn returned it; a
// repeat sees exactly what the codec round-trips. With encoding/json, the
// default: exported fields only; a time.Time keeps its instant to the
// nanosecond and its offset from UTC but not its Location's name (a zone
// comes back as a fixed offset, UTC as UTC) nor its monotonic reading; a
// [16]byte UUID comes back as it went, as do a *big.Int of any size and a
// json.RawMessage without insignificant white space (with it, compacted);
// numbers decoded into an interface{} become float64, so give them a type
// (int64, *big.Int, json.Number).
func DoJSON[T, TTx any](ctx context.Context, s *Store[TTx], tx TTx, req Request, fn func(ctx context.Context) (T, error)) (T, sqlonce.Result, error) {
	var zero T
	op := obs.Start(s.observer, "dedupe", "DoJSON", req.Scope, req.Key)
	if fn == nil {
		err := fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
		op.End(ctx, sqlonce.Result{}, err)
		return zero, sqlonce.Result{}, err
	}
	var first T
	res, err := s.run(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		first = v
		return s.codec.Marshal(v)
	}, true, &op)
	v, res, err := decoded(s.codec, req, res, err, first)
	err = op.End(ctx, res, err)
	return v, res, err
}

// decoded finishes DoJSON and RunJSON: first on FirstRun, the recorded
// response decoded on AlreadyDone.
func decoded[T any](c Codec, req Request, res sqlonce.Result, err error, first T) (T, sqlonce.Result, error) {
	var zero T
	if err != nil {
		return zero, res, err
	}
	if res.FirstRun() {
		return first, res, nil
	}
	var v T
	if err := c.Unmarshal(res.Response, &v); err != nil {
		return zero, sqlonce.Result{}, fmt.Errorf("sqlonce/dedupe: decode recorded response for %q: %w", req.Key, err)
	}
	return v, res, nil
}

func (s *Store[TTx]) run(ctx context.Context, tx TTx, req Request, fn func(ctx context.Context) ([]byte, error), record bool, op *obs.Op) (sqlonce.Result, error) {
	if err := keys.CheckTx(tx); err != nil {
		return sqlonce.Result{}, err
	}
	ttl, err := s.check(req)
	if err != nil {
		return sqlonce.Result{}, err
	}
	k := s.key(req.Scope, req.Key)
	c, err := s.engine.Claim(ctx, tx, driver.ClaimParams{
		Key:         k,
		Fingerprint: req.Fingerprint,
		TTL:         ttl,
		LockWait:    s.lockWait,
		Now:         testclock.Now(ctx),
	})
	op.Decided()
	if err != nil {
		return sqlonce.Result{}, s.claimError(req, err)
	}
	if !c.Won {
		return existing(req, c.Existing)
	}
	if c.Takeover {
		op.Takeover()
	}
	// unclaim undoes the claim when no response gets recorded, so that a
	// caller who commits anyway leaves no key marked done. Best effort: if
	// the error aborted tx (PostgreSQL), this fails too and tx cannot
	// commit anyway. After a MySQL deadlock the claim is already gone with
	// tx, and the DELETE would run in autocommit: it would wait for a
	// duplicate that took the key since, then delete that duplicate's
	// committed key.
	unclaim := func(cause error) {
		if !driver.Classify(cause).Has(driver.TxRolledBack) {
			_ = s.engine.Unclaim(ctx, tx, k, c.Token)
		}
	}
	op.WorkStart()
	resp, err := fn(ctx)
	op.WorkEnd()
	if err != nil {
		unclaim(err)
		return sqlonce.Result{}, err
	}
	if record {
		if len(resp) > s.maxResponse {
			unclaim(nil)
			return sqlonce.Result{}, fmt.Errorf("%w: %d bytes for key %q, limit %d", sqlonce.ErrResponseTooLarge, len(resp), req.Key, s.maxResponse)
		}
		if resp == nil {
			resp = []byte{}
		}
		if err := s.engine.SetResponse(ctx, tx, k, c.Token, resp); err != nil {
			unclaim(err)
			return sqlonce.Result{}, fmt.Errorf("sqlonce/dedupe: record response for %q: %w", req.Key, err)
		}
	} else if err := driver.CheckClaim(ctx, s.caps.ClaimChecker, tx, k, c.Token); err != nil {
		// Nothing wrote by the token after fn: the engine proves, where
		// it must, that tx still holds the claim (see driver.ClaimChecker).
		unclaim(err)
		return sqlonce.Result{}, fmt.Errorf("sqlonce/dedupe: key %q after the work: %w", req.Key, err)
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
}

func (s *Store[TTx]) claimError(req Request, err error) error {
	if s.lockWait > 0 && driver.Classify(err).Has(driver.LockNotAvailable) {
		if errors.Is(err, driver.ErrTxRolledBack) {
			// tx is gone: IsRetryable must say so.
			return fmt.Errorf("%w: key %q in scope %q is held by another transaction: %w", sqlonce.ErrInProgress, req.Key, req.Scope, err)
		}
		// The cause is formatted, not wrapped: the claim gave up alone and
		// tx is usable, so IsRetryable must not tell the caller to roll
		// back and retry, which would be waiting after all.
		return fmt.Errorf("%w: key %q in scope %q is held by another transaction (%v)", sqlonce.ErrInProgress, req.Key, req.Scope, err)
	}
	return fmt.Errorf("sqlonce/dedupe: claim %q in scope %q: %w", req.Key, req.Scope, err)
}

func existing(req Request, e driver.Existing) (sqlonce.Result, error) {
	if e.Leased {
		return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q is leased", sqlonce.ErrInProgress, req.Key, req.Scope)
	}
	if !bytes.Equal(e.Fingerprint, req.Fingerprint) {
		return sqlonce.Result{}, fmt.Errorf("%w: key %q in scope %q", sqlonce.ErrKeyReuse, req.Key, req.Scope)
	}
	return sqlonce.Result{Outcome: sqlonce.AlreadyDone, Response: e.Response}, nil
}

// PurgeTx deletes up to limit expired keys in tx and reports how many,
// oldest first. Held leases are never expired: a lease keeps its key alive
// at least until its deadline. On PostgreSQL it skips rows that other
// transactions have locked, so that purgers and claims in progress do not
// wait on each other; on MySQL/MariaDB it waits for them (an expired key
// being taken over, another purger's batch), and each key is still
// deleted once. limit is at most 100000; 0 is DefaultPurgeBatch
// (sqlonce.ErrInvalidArgument for a negative limit or one over 100000,
// before any SQL runs).
func (s *Store[TTx]) PurgeTx(ctx context.Context, tx TTx, limit int) (n int64, err error) {
	op := obs.Start(s.observer, "dedupe", "PurgeTx", "", "")
	defer func() { op.Rows(n); err = op.Done(ctx, err) }()
	return s.purgeTx(ctx, tx, limit)
}

func (s *Store[TTx]) purgeTx(ctx context.Context, tx TTx, limit int) (int64, error) {
	if err := keys.CheckTx(tx); err != nil {
		return 0, err
	}
	if limit == 0 {
		limit = DefaultPurgeBatch
	}
	if err := owntx.CheckPurge("limit", limit); err != nil {
		return 0, err
	}
	n, err := s.engine.Purge(ctx, tx, limit, testclock.Now(ctx))
	if err != nil {
		return n, fmt.Errorf("sqlonce/dedupe: purge: %w", err)
	}
	return n, nil
}

// Purge deletes every expired key, batch keys at a time (DefaultPurgeBatch
// for 0), each batch in a short transaction of its own on the driver's
// database handle, and reports how many it removed. Short batches keep
// locks brief next to live traffic. It stops at the first batch smaller
// than batch, or when ctx is done. Several instances may run it at once
// (from a cron job on every node, say): each expired key is removed by
// exactly one of them. A batch that deadlocks, or that conflicts with
// another purger's on another node of a cluster (Galera), is retried, after
// longer pauses and at half the size when the conflicts go on. It runs on
// the driver's database handle.
func (s *Store[TTx]) Purge(ctx context.Context, batch int) (total int64, err error) {
	op := obs.Start(s.observer, "dedupe", "Purge", "", "")
	defer func() { op.Rows(total); err = op.Done(ctx, err) }()
	if batch == 0 {
		batch = DefaultPurgeBatch
	}
	if err := owntx.CheckPurge("batch", batch); err != nil {
		return 0, err
	}
	return owntx.Purge(ctx, batch, func(limit int) (int64, error) {
		var n int64
		err := owntx.Run(ctx, s.engine, func(ctx context.Context, tx TTx) error {
			var err error
			n, err = s.purgeTx(ctx, tx, limit)
			return err
		})
		return n, err
	})
}
