package token

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

const (
	// DefaultTTL is how long a token lives unless WithTTL says otherwise.
	DefaultTTL = time.Hour

	// Len is the length of every token Issue returns: 32 random bytes
	// (256 bits) in unpadded base64url, safe in a URL, a form field or a
	// header without escaping.
	Len = 43

	// DefaultPurgeBatch is the batch size Purge uses for a batch of 0.
	DefaultPurgeBatch = 1000
)

// Errors returned by Consume, besides the sqlonce ones. They never carry
// the token itself: it is a secret until consumed.
var (
	// ErrUnknown: no token with this value was issued, or it was purged
	// after it expired, or the value is not a token at all (wrong length
	// or alphabet; no SQL runs then).
	ErrUnknown = errors.New("sqlonce/token: unknown token")

	// ErrExpired: the token was issued but its time ran out, consumed or
	// not. Issue a new one.
	ErrExpired = errors.New("sqlonce/token: token expired")

	// ErrOtherScope: the token was issued for another scope: a token
	// fetched for one form, user or operation submitted to another.
	ErrOtherScope = errors.New("sqlonce/token: token issued for another scope")
)

// Store issues and consumes one-time tokens in the sqlonce_tokens table
// through a driver. It is safe for concurrent use.
type Store[TTx any] struct {
	engine   driver.Engine[TTx]
	caps     driver.Capabilities[TTx]
	ttl      time.Duration
	observer sqlonce.Observer
}

// Option configures a Store.
type Option func(*options) error

type options struct {
	ttl time.Duration
}

// WithTTL sets how long tokens live from Issue (DefaultTTL otherwise, and
// for 0; sqlonce.ErrInvalidArgument below 0 or between 0 and 1µs, which
// the database cannot count). A consumed token is kept until then, so that
// a repeat is recognised as AlreadyDone; after it, the token is
// ErrExpired, then, once purged, ErrUnknown.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) error {
		if ttl == 0 {
			ttl = DefaultTTL
		}
		if ttl < time.Microsecond {
			return fmt.Errorf("%w: token TTL %v is shorter than 1µs", sqlonce.ErrInvalidArgument, ttl)
		}
		o.ttl = ttl
		return nil
	}
}

// New returns a Store on the given driver. It returns an error matching
// sqlonce.ErrInvalidArgument for a nil driver or one not built by its
// package's New (a zero Driver), or an invalid option.
func New[TTx any](d sqlonce.Driver[TTx], opts ...Option) (*Store[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: token: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	o := options{ttl: DefaultTTL}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	e := d.Engine()
	return &Store[TTx]{engine: e, caps: e.Capabilities(), ttl: o.ttl, observer: obs.Of(d)}, nil
}

// Issue issues a token for scope, committed at once on the driver's
// database handle (on PostgreSQL one statement in autocommit), and
// returns it.
// The token is 256 bits from crypto/rand; only its SHA-256 hash is stored.
// Hand it to the client (a hidden form field, a response header) and have
// the client send it back with the request it guards.
//
// scope says what the token may be used for: a form and the session it was
// served to ("checkout:session-81f2"), a user and an operation. Consume
// refuses the token for any other scope. An invalid scope returns
// sqlonce.ErrInvalidKey before any SQL runs.
func (s *Store[TTx]) Issue(ctx context.Context, scope string) (tok string, err error) {
	op := obs.Start(s.observer, "token", "Issue", scope, "")
	defer func() { err = op.Done(ctx, err) }()
	if err := keys.Check("scope", scope); err != nil {
		return "", err
	}
	// One INSERT: in autocommit where the driver can (PostgreSQL), one
	// round trip with no BEGIN and COMMIT around it.
	err = owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, &op, func(ctx context.Context, tx TTx) error {
		var err error
		tok, err = s.issueTx(ctx, tx, scope)
		return err
	})
	if err != nil {
		return "", err
	}
	return tok, nil
}

// IssueTx is Issue in the caller's transaction: the token exists once tx
// commits, and not at all if it rolls back.
func (s *Store[TTx]) IssueTx(ctx context.Context, tx TTx, scope string) (_ string, err error) {
	op := obs.Start(s.observer, "token", "IssueTx", scope, "")
	defer func() { err = op.Done(ctx, err) }()
	return s.issueTx(ctx, tx, scope)
}

func (s *Store[TTx]) issueTx(ctx context.Context, tx TTx, scope string) (string, error) {
	if err := keys.CheckTx(tx); err != nil {
		return "", err
	}
	if err := keys.Check("scope", scope); err != nil {
		return "", err
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails: crypto/rand crashes the program instead
	tok := base64.RawURLEncoding.EncodeToString(raw[:])
	h := sha256.Sum256(raw[:])
	if err := s.engine.TokenInsert(ctx, tx, h[:], scope, s.ttl, testclock.Now(ctx)); err != nil {
		return "", fmt.Errorf("sqlonce/token: issue for scope %q: %w", scope, err)
	}
	return tok, nil
}

// Consume consumes token for scope in tx, in one conditional UPDATE judged
// by the rows it changed: whichever transaction changes the row consumes
// the token, and the consumption commits or rolls back with tx, together
// with the business writes the token guards. A crash before the commit
// leaves the token unconsumed for a retry; a crash after it leaves both
// the writes and the consumption. It returns:
//   - FirstRun: this call consumed the token; do the work in tx and commit;
//   - AlreadyDone: a transaction that committed consumed it earlier (a
//     double submit, a retry after a lost response); do nothing;
//   - ErrUnknown, ErrExpired, ErrOtherScope: refuse the request;
//   - sqlonce.ErrInvalidKey: an invalid scope, before any SQL runs;
//   - an error for which sqlonce.IsRetryable is true: roll back and retry
//     (PostgreSQL REPEATABLE READ and SERIALIZABLE report a consumption
//     that committed after the transaction's snapshot this way).
//
// A concurrent Consume of the same token waits until the transaction
// holding it ends, then returns AlreadyDone if that transaction committed,
// or consumes the token if it rolled back.
//
// Only the token's state is recorded, not an answer: a repeat that must
// get the first run's response back is dedupe's job (use the token as the
// dedupe key, in the same transaction). The library never commits or
// rolls back tx.
//
// A repeat costs what a first run costs: one statement, or two on some
// drivers and paths (docs/drivers.md, Statements per call).
func (s *Store[TTx]) Consume(ctx context.Context, tx TTx, scope, token string) (res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "token", "Consume", scope, token)
	defer func() { err = op.End(ctx, res, err) }()
	return s.consume(ctx, tx, scope, token)
}

func (s *Store[TTx]) consume(ctx context.Context, tx TTx, scope, token string) (sqlonce.Result, error) {
	if err := keys.CheckTx(tx); err != nil {
		return sqlonce.Result{}, err
	}
	if err := keys.Check("scope", scope); err != nil {
		return sqlonce.Result{}, err
	}
	h, err := hash(token)
	if err != nil {
		return sqlonce.Result{}, err
	}
	now := testclock.Now(ctx)
	c, err := s.engine.TokenConsume(ctx, tx, h, scope, now)
	if err != nil {
		return sqlonce.Result{}, fmt.Errorf("sqlonce/token: consume in scope %q: %w", scope, err)
	}
	if c.Consumed {
		return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
	}
	st, found := c.State, c.Found
	if c.Read && !(found && st.Scope == scope && !st.Expired && !st.Consumed) {
		return judge(scope, st, found)
	}
	// The statement did not say why it changed nothing, or read the token
	// live and unconsumed: its snapshot predates a consumption it waited
	// for (PostgreSQL, READ COMMITTED). A statement of its own reads the
	// row committed since.
	st, found, err = s.engine.TokenGet(ctx, tx, h, now)
	if err != nil {
		return sqlonce.Result{}, fmt.Errorf("sqlonce/token: read token in scope %q: %w", scope, err)
	}
	return judge(scope, st, found)
}

// judge answers a Consume that changed nothing from the token's state.
func judge(scope string, st driver.TokenState, found bool) (sqlonce.Result, error) {
	switch {
	case !found:
		return sqlonce.Result{}, fmt.Errorf("%w (scope %q)", ErrUnknown, scope)
	case st.Scope != scope:
		return sqlonce.Result{}, fmt.Errorf("%w: presented in scope %q", ErrOtherScope, scope)
	case st.Expired:
		return sqlonce.Result{}, fmt.Errorf("%w (scope %q)", ErrExpired, scope)
	case st.Consumed:
		return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
	}
	// Live and unconsumed, yet the UPDATE changed nothing, read again in a
	// statement of its own: the read saw a state the UPDATE did not.
	return sqlonce.Result{}, fmt.Errorf("%w: token in scope %q is live and unconsumed after a consume that changed nothing", sqlonce.ErrStaleRead, scope)
}

// hash decodes a token and returns its SHA-256 hash, or ErrUnknown for a
// value Issue cannot have returned.
func hash(token string) ([]byte, error) {
	if len(token) != Len {
		return nil, fmt.Errorf("%w: a token is %d characters, not %d", ErrUnknown, Len, len(token))
	}
	// Strict: one token, one spelling. Without it the last character could
	// vary in its unused low bits and still decode to the same bytes.
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("%w: not a token", ErrUnknown)
	}
	h := sha256.Sum256(raw)
	return h[:], nil
}

// PurgeTx deletes up to limit expired tokens, consumed or not, in tx and
// reports how many. limit is at most 100000; 0 is DefaultPurgeBatch
// (sqlonce.ErrInvalidArgument for a negative limit or one over 100000,
// before any SQL runs).
func (s *Store[TTx]) PurgeTx(ctx context.Context, tx TTx, limit int) (n int64, err error) {
	op := obs.Start(s.observer, "token", "PurgeTx", "", "")
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
	n, err := s.engine.TokenPurge(ctx, tx, limit, testclock.Now(ctx))
	if err != nil {
		return n, fmt.Errorf("sqlonce/token: purge: %w", err)
	}
	return n, nil
}

// Purge deletes every expired token, batch at a time (DefaultPurgeBatch
// for 0), each batch in a short transaction of its own on the driver's
// database handle, and reports how many it
// removed. Several instances may run it at once, on one server or on every
// node of a cluster: a batch that conflicts with another's is retried as
// dedupe.Store.Purge's is.
func (s *Store[TTx]) Purge(ctx context.Context, batch int) (total int64, err error) {
	op := obs.Start(s.observer, "token", "Purge", "", "")
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
