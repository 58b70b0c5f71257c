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
	"github.com/sqlonce/sqlonce/internal/storeopt"
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

	// DefaultLease is the lease WithLease(0) takes: 30 seconds.
	DefaultLease = 30 * time.Second
)

// Middleware makes the handlers it wraps idempotent per Idempotency-Key.
// Build one with New and wrap handlers with Wrap. It is safe for
// concurrent use.
type Middleware[TTx any] struct {
	config
	principal func(*http.Request) string
	store     *dedupe.Store[TTx]
	observer  sqlonce.Observer
	runner    idem.Runner[TTx] // transactional mode
}

// New returns a Middleware on the driver. principal names the
// authenticated caller of a request (a user id, an API client id): keys
// are scoped by it, so that one caller can neither trigger nor read
// another's replay, and guessing a key gets nothing (draft section 5: a
// composite key of the client's key and what the server knows of the
// client). A key names one request: the same key sent by the same caller
// to another method or route is a reuse, answered 422. A request with a key whose principal is
// "" is answered 401. Return a constant for endpoints open to anonymous
// callers only when they may share keys.
//
// Transactional mode is the default; WithLease selects lease mode. New
// returns an error matching sqlonce.ErrInvalidArgument for a nil driver or
// principal or an invalid option, and one matching both
// sqlonce.ErrInvalidArgument and sqlonce.ErrNoDB when the driver has no
// database handle but needs one: lease mode always does, transactional
// mode unless WithTxFunc runs the transactions.
func New[TTx any](d sqlonce.Driver[TTx], principal func(r *http.Request) string, opts ...Option) (*Middleware[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, invalid("nil driver")
	}
	if principal == nil {
		return nil, invalid("nil principal func")
	}
	c := config{
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
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
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
	if c.wait > 0 && c.lease == 0 {
		wait = dedupe.WithLockWait(c.wait)
	}
	// Its keys live in a namespace of their own: no dedupe scope or inbox
	// consumer can spell one.
	store, err := dedupe.New(obs.Bare(d), wait, dedupe.WithTTL(c.ttl), dedupe.WithMaxResponseSize(dedupe.MaxResponseSize),
		storeopt.Namespace(driver.NamespaceHTTP).(dedupe.Option), storeopt.StepsNamespace(driver.NamespaceHTTPSteps).(dedupe.Option))
	if err != nil {
		return nil, err
	}
	m := &Middleware[TTx]{config: c, principal: principal, store: store, observer: obs.Of(d)}
	e := d.Engine()
	if (c.lease > 0 || c.txFunc == nil) && !idem.HasDB(e) {
		mode := "transactional mode without WithTxFunc"
		if c.lease > 0 {
			mode = "lease mode"
		}
		return nil, fmt.Errorf("%w: httpidem: %s needs a driver built with a database handle: %w", sqlonce.ErrInvalidArgument, mode, sqlonce.ErrNoDB)
	}
	m.runner = idem.Runner[TTx]{Store: store, RunTx: e.InTx, Run: true}
	if c.txFunc != nil {
		m.runner.Run = false
		run, ok := c.txFunc.(func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error)
		if !ok {
			return nil, invalid("WithTxFunc is for another transaction type than the driver's")
		}
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

func defaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}

func logError(r *http.Request, err error) {
	slog.Default().ErrorContext(r.Context(), "httpidem", "method", r.Method, "path", r.URL.Path, "err", err)
}
