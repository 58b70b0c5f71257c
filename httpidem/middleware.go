package httpidem

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/storecfg"
)

const (
	// Header is the request field that carries the key, unless
	// WithKeyHeader names another.
	Header = "Idempotency-Key"

	// ReplayHeader marks a response replayed from the record of an
	// earlier request with the same key, with the value "true". A first
	// response never carries it.
	ReplayHeader = "Idempotent-Replayed"

	// DefaultMaxBody is the largest request body, in bytes, the middleware
	// accepts unless WithMaxBody says otherwise: 1 MiB.
	DefaultMaxBody = 1 << 20

	// DefaultLease is the lease NewLeased takes for a lease of 0: 30
	// seconds.
	DefaultLease = 30 * time.Second
)

// Middleware makes the handlers it wraps idempotent per Idempotency-Key.
// Build one with New, NewWithTxFunc or NewLeased, which choose its mode,
// and wrap handlers with Wrap. It is safe for concurrent use.
type Middleware[TTx any] struct {
	options
	principal func(*http.Request) string
	lease     time.Duration // lease mode when > 0
	store     *dedupe.Store[TTx]
	observer  sqlonce.Observer
	runner    idem.Runner[TTx] // transactional mode
}

// TxFunc runs fn in a transaction it begins, for NewWithTxFunc: it must
// call fn with the transaction, commit when fn returns nil and roll back
// otherwise, and return fn's error. Around pgx.BeginTxFunc or
// (*sql.DB).BeginTx, it sets the isolation level or the pool.
type TxFunc[TTx any] func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error

// New returns a Middleware in transactional mode: each handled request
// runs in a transaction the middleware begins on the driver's database
// handle, the handler does its database work in it (TxFrom), and the key
// and the recorded answer commit with that work or not at all.
//
// principal names the authenticated caller of a request (a user id, an
// API client id): keys are scoped by it, so that one caller can neither
// trigger nor read another's replay (draft section 5). A request with a
// key whose principal is "" is answered 401; return a constant for
// anonymous endpoints only when their callers may share keys.
//
// New returns an error matching sqlonce.ErrInvalidArgument for a nil
// driver or one not built by its package's New, a nil principal, or a bad
// option (the error names it).
func New[TTx any](d sqlonce.Driver[TTx], principal func(r *http.Request) string, opts ...Option) (*Middleware[TTx], error) {
	return build(d, principal, nil, 0, opts)
}

// NewWithTxFunc returns a Middleware in transactional mode, as New does,
// whose transactions run runs: a caller's isolation level, pool or
// transaction options. The driver needs no database handle (Steps does).
//
// The middleware cannot see whether run's COMMIT reached the database: an
// error run returns after the handler's work returned, other than one
// sqlonce.IsRetryable accepts, is answered 500 with CodeOutcomeUnknown.
// It returns New's errors, and one matching sqlonce.ErrInvalidArgument for
// a nil run.
func NewWithTxFunc[TTx any](d sqlonce.Driver[TTx], principal func(r *http.Request) string, run TxFunc[TTx], opts ...Option) (*Middleware[TTx], error) {
	if run == nil {
		return nil, invalid("NewWithTxFunc: nil TxFunc")
	}
	return build(d, principal, run, 0, opts)
}

// NewLeased returns a Middleware in lease mode, for handlers whose work
// leaves the database (a payment provider, mail): the key is claimed
// with a lease of lease (DefaultLease for 0) and committed before the
// handler runs, which gets it with LeaseFrom; the recorded answer
// completes the lease, an unrecorded one releases it. Choose lease longer
// than the handler's own time limit.
//
// It returns New's errors, and one matching sqlonce.ErrInvalidArgument for
// a lease under 1µs.
func NewLeased[TTx any](d sqlonce.Driver[TTx], principal func(r *http.Request) string, lease time.Duration, opts ...Option) (*Middleware[TTx], error) {
	if lease == 0 {
		lease = DefaultLease
	}
	if lease < time.Microsecond {
		return nil, invalid("NewLeased: lease %v is shorter than 1µs", lease)
	}
	return build(d, principal, nil, lease, opts)
}

// build is the constructors' common part: transactional mode on run (the
// driver's InTx when nil) for lease 0, lease mode otherwise.
func build[TTx any](d sqlonce.Driver[TTx], principal func(r *http.Request) string, run TxFunc[TTx], lease time.Duration, opts []Option) (*Middleware[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, invalid("%s", driver.NotBuilt)
	}
	if principal == nil {
		return nil, invalid("nil principal func")
	}
	c := options{
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		required:    func(*http.Request) bool { return true },
		route:       defaultRoute,
		respHeaders: canonical(DefaultResponseHeaders), // ETag is Etag to net/http
		record:      RecordAll,
		maxBody:     DefaultMaxBody,
		ttl:         dedupe.DefaultTTL,
		maxResponse: dedupe.DefaultMaxResponseSize,
		onError:     logError,
		keyHeader:   Header,
		reuseStatus: http.StatusUnprocessableEntity,
	}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: httpidem: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	// A duplicate is told 409 at once, not held until the first request's
	// transaction ends, unless WithWait bounds a wait. Lease mode waits
	// (serveLease) by asking again; its claims never wait on a lock.
	// WithMaxResponseSize bounds the body alone (the recorder checks it);
	// the store takes the whole record, body and recorded header fields,
	// up to what it can hold (encode checks that). The Middleware reports
	// its requests itself (with their status); its Store must not report
	// them again as dedupe's.
	wait := dedupe.WithNoWait()
	if c.wait > 0 && lease == 0 {
		wait = dedupe.WithLockWait(c.wait)
	}
	// Its keys live in a namespace of their own: no dedupe scope or inbox
	// consumer can spell one.
	store, err := dedupe.New(obs.Bare(d), wait, dedupe.WithTTL(c.ttl), dedupe.WithMaxResponseSize(dedupe.MaxResponseSize),
		func(o *storecfg.Options) error {
			o.Namespace, o.StepsNamespace = driver.NamespaceHTTP, driver.NamespaceHTTPSteps
			return nil
		})
	if err != nil {
		return nil, err
	}
	m := &Middleware[TTx]{options: c, principal: principal, lease: lease, store: store, observer: obs.Of(d)}
	e := d.Engine()
	m.runner = idem.Runner[TTx]{Store: store, RunTx: e.InTx, Run: true}
	if run != nil {
		m.runner.Run = false
		m.runner.RunTx = run
	}
	return m, nil
}

// Purge deletes expired keys, batch at a time (dedupe.DefaultPurgeBatch
// for 0), as dedupe.Store.Purge does: run it from a periodic job. Keys of
// every dedupe store on the same table are purged alike.
func (m *Middleware[TTx]) Purge(ctx context.Context, batch int) (n int64, err error) {
	op := obs.Start(m.observer, "httpidem", "Purge", "", "")
	defer func() { op.Rows(n); op.Done(ctx, err) }()
	return m.store.Purge(ctx, batch)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: httpidem: "+format, append([]any{sqlonce.ErrInvalidArgument}, args...)...)
}

// optionError is the error of a bad option, which it names.
func optionError(option, format string, args ...any) error {
	return idem.OptionError("httpidem", option, format, args...)
}

func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}

func logError(r *http.Request, err error) {
	slog.Default().ErrorContext(r.Context(), "httpidem", "method", r.Method, "path", r.URL.Path, "err", err)
}
