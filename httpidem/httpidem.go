package httpidem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/dberr"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/owntx"
)

const (
	// Header is the request field that carries the key.
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

	// txAttempts bounds the runs of one request in transactional mode when
	// the database asks for a retry (deadlock, serialization failure).
	txAttempts = owntx.Attempts
)

// DefaultResponseHeaders are the response header fields recorded with a
// response and replayed, unless WithResponseHeaders says otherwise: the
// ones that describe the representation and the created resource. Fields
// that belong to one exchange (Set-Cookie, Date, tracing ids) are left
// out: a replay carries the first answer, not the first exchange.
var DefaultResponseHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Location", "Content-Type", "ETag", "Last-Modified", "Link", "Location", "Vary",
}

// RecordFunc decides from a response's status code whether the response
// is recorded with its key. A recorded response is replayed to every
// repeat of the key; one that is not recorded leaves the key free, so that
// a retry runs the handler again. In transactional mode it also decides
// the handler's transaction: committed with the key when recorded, rolled
// back otherwise.
type RecordFunc func(status int) bool

// RecordAll records every response, success or error: the draft's
// "respond with the result of the previously completed operation, success
// or an error". It is the default.
func RecordAll(int) bool { return true }

// RecordSuccess records 2xx responses only: a client that got an error
// may retry with the same key and have the request run again.
func RecordSuccess(status int) bool { return status >= 200 && status < 300 }

// Option configures a Middleware.
type Option func(*config) error

type config struct {
	methods     map[string]bool
	required    func(*http.Request) bool
	route       func(*http.Request) string
	fpHeaders   []string
	respHeaders []string
	record      RecordFunc
	maxBody     int64
	ttl         time.Duration
	maxResponse int
	lease       time.Duration
	noRepeat    time.Duration
	docs        string
	txFunc      any
	onError     func(*http.Request, error)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: httpidem: "+format, append([]any{sqlonce.ErrInvalidArgument}, args...)...)
}

// WithMethods sets the request methods the middleware handles (POST and
// PATCH otherwise, the methods that are not idempotent). Requests with
// other methods pass straight through.
func WithMethods(methods ...string) Option {
	return func(c *config) error {
		if len(methods) == 0 {
			return invalid("no methods")
		}
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[strings.ToUpper(m)] = true
		}
		return nil
	}
}

// WithRequired decides which handled requests must carry an
// Idempotency-Key: a request for which it returns true and that has none
// is answered 400 (draft section 2.7), unless WithNoRepeatSubmit derives a
// key. Without this option every handled request must. Use it to require
// the key on some routes only (r.Pattern, r.URL.Path).
func WithRequired(required func(r *http.Request) bool) Option {
	return func(c *config) error {
		if required == nil {
			return invalid("nil required func")
		}
		c.required = required
		return nil
	}
}

// WithRoute names the route a request belongs to, for the key's scope.
// By default it is r.Pattern, the net/http ServeMux pattern that matched
// (set when the middleware wraps a handler registered on a ServeMux), or
// r.URL.Path when there is none. Routers other than ServeMux have their
// own way to name the matched route.
func WithRoute(route func(r *http.Request) string) Option {
	return func(c *config) error {
		if route == nil {
			return invalid("nil route func")
		}
		c.route = route
		return nil
	}
}

// WithFingerprintHeaders adds request header fields to the request
// fingerprint, which otherwise covers the method, the path and query, and
// the body. A key presented again with a different fingerprint is answered
// 422. Add the fields that change what the request does (Content-Type, an
// API version header).
func WithFingerprintHeaders(names ...string) Option {
	return func(c *config) error {
		c.fpHeaders = canonical(names)
		return nil
	}
}

// WithResponseHeaders sets the response header fields recorded with a
// response and replayed (DefaultResponseHeaders otherwise). The first
// response always carries every field the handler set.
func WithResponseHeaders(names ...string) Option {
	return func(c *config) error {
		c.respHeaders = canonical(names)
		return nil
	}
}

func canonical(names []string) []string {
	out := make([]string, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		n = http.CanonicalHeaderKey(n)
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// WithRecord sets which responses are recorded (RecordAll otherwise).
func WithRecord(record RecordFunc) Option {
	return func(c *config) error {
		if record == nil {
			return invalid("nil record func")
		}
		c.record = record
		return nil
	}
}

// WithMaxBody sets the largest request body accepted, in bytes
// (DefaultMaxBody otherwise). A larger one is answered 413 before the
// handler runs. The middleware reads the body to fingerprint it and hands
// the handler a copy to read.
func WithMaxBody(n int64) Option {
	return func(c *config) error {
		if n < 0 {
			return invalid("max body %d is negative", n)
		}
		c.maxBody = n
		return nil
	}
}

// WithTTL sets how long a key and its recorded response live
// (dedupe.DefaultTTL, 24 hours, otherwise). The draft asks servers to
// publish this expiration policy. After it, the key is free again.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl <= 0 {
			return invalid("TTL %v is not positive", ttl)
		}
		c.ttl = ttl
		return nil
	}
}

// WithMaxResponseSize sets the largest response body recorded, in bytes
// (dedupe.DefaultMaxResponseSize otherwise, at most
// dedupe.MaxResponseSize). A handler that writes more gets a 500 answer
// and, in transactional mode, its work rolled back: size it above the
// handler's largest answer.
func WithMaxResponseSize(n int) Option {
	return func(c *config) error {
		if n < 0 || n > dedupe.MaxResponseSize {
			return invalid("max response size %d is outside 0..%d", n, dedupe.MaxResponseSize)
		}
		c.maxResponse = n
		return nil
	}
}

// WithLease switches to lease mode, for handlers whose work has effects
// outside the database (a payment provider, mail): the key is claimed with
// a lease of d (DefaultLease for 0) in a short transaction of its own and
// committed before the handler runs; the recorded response completes it,
// a response that is not recorded releases it. Concurrent requests with
// the key are answered 409 while the lease holds. A holder that crashes
// leaves the lease to lapse after d, and a retry then runs the handler
// again: give the outside system the key or the lease's token (LeaseFrom)
// so that a repeated call is harmless there, and choose d longer than the
// handler's own time limit. The handler's context ends when the client
// goes away, and whatever the handler then answers is recorded like any
// answer: detach work that must run to its end (context.WithoutCancel).
// It needs a driver built with a database handle.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d == 0 {
			d = DefaultLease
		}
		if d < time.Microsecond {
			return invalid("lease %v is shorter than 1µs", d)
		}
		c.lease = d
		return nil
	}
}

// WithNoRepeatSubmit guards requests that carry no Idempotency-Key, such as
// HTML form posts, against repeat submits: their key is derived from the
// principal, the method, the route and the request fingerprint (path,
// query, body, fingerprint headers), and lives for window. Within it the
// same submit by the same caller runs once; repeats get the first
// response (with ReplayHeader), or 409 while it runs. A different body is
// a different submit. After the window the same submit runs again. A
// request that carries a key is handled by its key.
func WithNoRepeatSubmit(window time.Duration) Option {
	return func(c *config) error {
		if window <= 0 {
			return invalid("window %v is not positive", window)
		}
		c.noRepeat = window
		return nil
	}
}

// WithDocs gives the problems the middleware answers with a documentation
// URL: each problem's type becomes url#code and its title the problem's
// own, and a Link header with rel="describedby" points at url (draft
// section 2.7). Publish the key's format, the expiration policy and these
// codes there. Without it problems have type "about:blank".
func WithDocs(url string) Option {
	return func(c *config) error {
		c.docs = url
		return nil
	}
}

// WithTxFunc sets how transactional mode runs a request's transaction,
// in place of a transaction on the driver's database handle at the
// server's default isolation level: run must begin a transaction, call fn
// with it, commit when fn returns nil and roll back otherwise, returning
// fn's error. pgx users can pass a func around pgx.BeginTxFunc with the
// options they need; database/sql users one around db.BeginTx. TTx must be
// the driver's transaction type (New returns sqlonce.ErrInvalidArgument
// otherwise).
func WithTxFunc[TTx any](run func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error) Option {
	return func(c *config) error {
		if run == nil {
			return invalid("nil tx func")
		}
		c.txFunc = run
		return nil
	}
}

// WithErrorLog receives the errors the middleware cannot hand to anyone
// else: a database failure answered 500, a lease that could not be
// completed or released. slog.Default logs them otherwise.
func WithErrorLog(log func(r *http.Request, err error)) Option {
	return func(c *config) error {
		if log == nil {
			return invalid("nil error log")
		}
		c.onError = log
		return nil
	}
}

// Middleware makes the handlers it wraps idempotent per Idempotency-Key.
// Build one with New and wrap handlers with Wrap. It is safe for
// concurrent use.
type Middleware[TTx any] struct {
	config
	principal func(*http.Request) string
	store     *dedupe.Store[TTx]
	runTx     func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
}

// New returns a Middleware on the driver. principal names the
// authenticated caller of a request (a user id, an API client id): keys
// are scoped by it, and by the method and the route, so that one caller
// can neither trigger nor read another's replay, and guessing a key gets
// nothing (draft section 5: a composite key of the client's key and what
// the server knows of the client). A request with a key whose principal is
// "" is answered 401. Return a constant for endpoints open to anonymous
// callers only when they may share keys.
//
// Transactional mode is the default; WithLease selects lease mode. New
// returns an error matching sqlonce.ErrInvalidArgument for a nil driver or
// principal or an invalid option.
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
	}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	// A duplicate must be told 409 at once, not held until the first
	// request's transaction ends.
	store, err := dedupe.New(d, dedupe.WithNoWait(), dedupe.WithTTL(c.ttl), dedupe.WithMaxResponseSize(c.maxResponse))
	if err != nil {
		return nil, err
	}
	m := &Middleware[TTx]{config: c, principal: principal, store: store}
	e := d.Engine()
	m.runTx = func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error { return e.InTx(ctx, fn) }
	if c.txFunc != nil {
		run, ok := c.txFunc.(func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error)
		if !ok {
			return nil, invalid("WithTxFunc is for another transaction type than the driver's")
		}
		m.runTx = run
	}
	return m, nil
}

// Purge deletes expired keys, batch at a time (dedupe.DefaultPurgeBatch
// for 0), as dedupe.Store.Purge does: run it from a periodic job. Keys of
// every dedupe store on the same table are purged alike.
func (m *Middleware[TTx]) Purge(ctx context.Context, batch int) (int64, error) {
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

type txKey[TTx any] struct{}

type leaseKey struct{}

type failKey struct{}

// failure is where Fail leaves a handler's error for the attempt that
// runs the handler.
type failure struct{ err error }

// Fail tells the middleware that the request failed with err, typically an
// error from the handler's transaction: call it, then write the error
// answer as usual. The middleware records nothing and rolls the
// transaction back, whatever the status; when sqlonce.IsRetryable(err)
// (a deadlock, a serialization failure: the database asks for the
// transaction to run again) transactional mode runs the handler again in
// a new transaction and drops this attempt's answer, otherwise the client
// gets the handler's answer. Without Fail the middleware cannot see such
// an error behind a 500, and a transaction the database has aborted fails
// to record the answer instead: the client then gets a 500 problem and
// nothing is recorded. In lease mode Fail releases the lease.
func Fail(ctx context.Context, err error) {
	if f, ok := ctx.Value(failKey{}).(*failure); ok && err != nil {
		f.err = err
	}
}

// failedError carries the error a handler reported with Fail out of the
// transaction, so that the transaction rolls back.
type failedError struct{ err error }

func (e *failedError) Error() string { return "httpidem: the handler failed: " + e.err.Error() }
func (e *failedError) Unwrap() error { return e.err }

// TxFrom returns the transaction transactional mode runs the request's
// handler in. Do the handler's database work in it: it commits together
// with the key and the recorded response, or rolls back with them. ok is
// false in lease mode and for requests the middleware passes through.
func TxFrom[TTx any](ctx context.Context) (tx TTx, ok bool) {
	tx, ok = ctx.Value(txKey[TTx]{}).(TTx)
	return tx, ok
}

// LeaseFrom returns the lease lease mode holds while the request's handler
// runs. Pass its Token on to outside systems that can refuse a stale
// writer. ok is false in transactional mode.
func LeaseFrom(ctx context.Context) (l *dedupe.Lease, ok bool) {
	l, ok = ctx.Value(leaseKey{}).(*dedupe.Lease)
	return l, ok
}

// Wrap returns next made idempotent; its type fits routers' Use methods.
//
// A request with a handled method is checked before next runs: its
// Idempotency-Key (400 when malformed, or missing where required), its
// principal (401 when empty), its body (413 over the limit). Then the key
// decides: a new key runs next and records its response; a key recorded
// earlier with the same request fingerprint replays the response byte for
// byte, marked with ReplayHeader; with another fingerprint, 422; a key
// whose first request is still running, 409. Errors are RFC 9457 problem
// details (application/problem+json).
//
// next's response is buffered until it is recorded: streaming and
// http.Flusher are not available to it. In transactional mode next may be
// run more than once for one request, each time in a fresh transaction,
// when the database reports a deadlock or a serialization failure.
func (m *Middleware[TTx]) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		key, present, err := parseKey(r.Header.Values(Header))
		if err != nil {
			m.problem(w, http.StatusBadRequest, CodeKeyInvalid, err.Error())
			return
		}
		if present && (key == "" || len(key) > sqlonce.MaxKeyLen) {
			m.problem(w, http.StatusBadRequest, CodeKeyInvalid, fmt.Sprintf("the Idempotency-Key value must be 1 to %d characters", sqlonce.MaxKeyLen))
			return
		}
		derived := !present && m.noRepeat > 0
		if !present && !derived && m.required(r) {
			m.problem(w, http.StatusBadRequest, CodeKeyMissing, "this operation requires an Idempotency-Key header with a unique key per operation, sent again unchanged on every retry")
			return
		}
		if !present && !derived && m.lease > 0 {
			next.ServeHTTP(w, r) // no key and no transaction to hand over
			return
		}
		var principal string
		if present || derived {
			if principal = m.principal(r); principal == "" {
				m.problem(w, http.StatusUnauthorized, CodeNoPrincipal, "idempotency keys are kept per authenticated caller; authenticate the request")
				return
			}
		}
		body, ok := m.readBody(w, r)
		if !ok {
			return
		}
		var req *dedupe.Request
		if present || derived {
			fp := m.fingerprint(r, body)
			kind, ttl := byte('k'), time.Duration(0)
			if derived {
				key, kind, ttl = hex.EncodeToString(fp), 's', m.noRepeat
			}
			req = &dedupe.Request{Scope: scope(kind, principal, r.Method, m.route(r)), Key: key, Fingerprint: fp, TTL: ttl}
		}
		if m.lease > 0 {
			m.serveLease(w, r, next, body, *req)
			return
		}
		m.serveTx(w, r, next, body, req)
	})
}

// readBody reads the request body whole, refusing one over the limit,
// and reports whether the request goes on.
func (m *Middleware[TTx]) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		m.problem(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the request body is limited to %d bytes", m.maxBody))
		return nil, false
	}
	if r.ContentLength > m.maxBody {
		return tooLarge() // refused before a byte is read
	}
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.maxBody+1))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr) || int64(len(body)) > m.maxBody:
		return tooLarge()
	case err != nil:
		m.problem(w, http.StatusBadRequest, CodeBodyUnreadable, "the request body could not be read in full")
		return nil, false
	}
	return body, true
}

// fingerprint hashes what makes two requests with one key the same
// request: method, path, query, body and the configured header fields.
func (m *Middleware[TTx]) fingerprint(r *http.Request, body []byte) []byte {
	parts := [][]byte{[]byte(r.Method), []byte(r.URL.EscapedPath()), []byte(r.URL.RawQuery), body}
	for _, h := range m.fpHeaders {
		parts = append(parts, []byte(h), []byte(strings.Join(r.Header.Values(h), "\n")))
	}
	return dedupe.Fingerprint(parts...)
}

// scope is a key's namespace: the caller, the method and the route. The
// principal is length-prefixed so that no choice of principal and route
// spells another pair's scope; kind keeps client keys and derived submit
// keys apart. A scope the store would refuse (too long for the table, not
// valid UTF-8, a NUL byte) is replaced by its hash, which no readable scope
// can equal (those start with kind and a digit).
func scope(kind byte, principal, method, route string) string {
	s := string(kind) + strconv.Itoa(len(principal)) + ":" + principal + " " + method + " " + route
	if keys.Check("scope", s) == nil {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return string(kind) + "#" + hex.EncodeToString(sum[:])
}

var (
	errNotRecorded = errors.New("httpidem: response not recorded")
	errPanicked    = errors.New("httpidem: handler panicked")
)

// serve runs h and returns what it panicked with, if it did.
func serve(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// withBody returns r for the handler: ctx, and a fresh reader over the
// body the middleware read.
func withBody(ctx context.Context, r *http.Request, body []byte) *http.Request {
	r2 := r.WithContext(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r2
}

// serveTx is transactional mode: one transaction holds the key's claim,
// the handler's writes and the recorded response, and commits before the
// client hears anything. req is nil for a request without a key.
func (m *Middleware[TTx]) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, body []byte, req *dedupe.Request) {
	ctx := r.Context()
	for attempt := 1; ; attempt++ {
		var (
			rec      *recorder
			res      sqlonce.Result
			panicked any
		)
		err := m.runTx(ctx, func(ctx context.Context, tx TTx) error {
			run := func(ctx context.Context) ([]byte, error) {
				rec = newRecorder(m.maxResponse)
				fail := &failure{}
				hctx := context.WithValue(context.WithValue(ctx, txKey[TTx]{}, tx), failKey{}, fail)
				if panicked = serve(next, rec, withBody(hctx, r, body)); panicked != nil {
					return nil, errPanicked
				}
				if fail.err != nil {
					// Wrapped, so that dedupe sees a deadlock that took the
					// claim with it and does not try to undo the claim.
					return nil, &failedError{fail.err}
				}
				if rec.overrun {
					return nil, fmt.Errorf("%w: the handler wrote more than %d bytes", sqlonce.ErrResponseTooLarge, m.maxResponse)
				}
				if !m.record(rec.finalStatus()) {
					return nil, errNotRecorded // rolls the handler's writes back too
				}
				return rec.encode(m.respHeaders), nil
			}
			if req == nil {
				_, err := run(ctx)
				return err
			}
			var err error
			res, err = m.store.DoResponse(ctx, tx, *req, run)
			return err
		})
		if panicked != nil {
			panic(panicked) // after the rollback; net/http answers the client
		}
		var failed *failedError
		switch {
		case err == nil && req != nil && res.AlreadyDone():
			m.replay(w, r, res.Response)
		case errors.As(err, &failed) && sqlonce.IsRetryable(failed.err) && attempt < txAttempts && owntx.Pause(ctx, attempt):
			continue
		case err == nil || errors.Is(err, errNotRecorded) || errors.As(err, &failed):
			rec.writeTo(w)
		case errors.Is(err, sqlonce.ErrInProgress):
			m.inProgress(w)
		case errors.Is(err, sqlonce.ErrKeyReuse):
			m.reused(w)
		case ctx.Err() != nil:
			// The client is gone and the transaction rolled back: nobody
			// to answer, nothing to report.
		case sqlonce.IsRetryable(err) && !dberr.LockNotAvailable(err) && attempt < txAttempts && owntx.Pause(ctx, attempt):
			continue
		default:
			m.internal(w, r, err, notDone)
		}
		return
	}
}

// serveLease is lease mode: the key is claimed and committed as leased
// before the handler runs, then completed with the recorded response or
// released.
func (m *Middleware[TTx]) serveLease(w http.ResponseWriter, r *http.Request, next http.Handler, body []byte, req dedupe.Request) {
	ctx := r.Context()
	lease, res, err := m.store.Claim(ctx, req, m.lease)
	switch {
	case errors.Is(err, sqlonce.ErrInProgress):
		m.inProgress(w)
		return
	case errors.Is(err, sqlonce.ErrKeyReuse):
		m.reused(w)
		return
	case err != nil:
		if ctx.Err() == nil {
			m.internal(w, r, err, notDone)
		}
		return
	case res.AlreadyDone():
		m.replay(w, r, res.Response)
		return
	}
	// The lease's bookkeeping must happen even when the client has gone:
	// the work may have been done.
	bg := context.WithoutCancel(ctx)
	release := func() {
		if err := m.store.Release(bg, lease); err != nil {
			m.onError(r, fmt.Errorf("httpidem: release lease on key %q: %w", req.Key, err))
		}
	}
	rec := newRecorder(m.maxResponse)
	fail := &failure{}
	hctx := context.WithValue(context.WithValue(ctx, leaseKey{}, lease), failKey{}, fail)
	if p := serve(next, rec, withBody(hctx, r, body)); p != nil {
		release()
		panic(p)
	}
	switch {
	case fail.err != nil:
		release()
	case rec.overrun:
		release()
		m.internal(w, r, fmt.Errorf("%w: the handler wrote more than %d bytes", sqlonce.ErrResponseTooLarge, m.maxResponse), notRecords)
		return
	case !m.record(rec.finalStatus()):
		release()
	default:
		if err := m.store.Complete(bg, lease, rec.encode(m.respHeaders)); err != nil {
			// The work is done and its answer is the client's; only the
			// record failed. A lost lease means another request took the
			// key over after this one overran the lease.
			if errors.Is(err, sqlonce.ErrResponseTooLarge) {
				release()
			}
			m.onError(r, fmt.Errorf("httpidem: complete lease on key %q: %w", req.Key, err))
		}
	}
	rec.writeTo(w)
}

func (m *Middleware[TTx]) replay(w http.ResponseWriter, r *http.Request, recorded []byte) {
	rec, err := decode(recorded)
	if err != nil {
		m.internal(w, r, err, notRecords)
		return
	}
	rec.header.Set(ReplayHeader, "true")
	rec.writeTo(w)
}

func (m *Middleware[TTx]) inProgress(w http.ResponseWriter) {
	m.problem(w, http.StatusConflict, CodeInProgress, "a request with this Idempotency-Key is still being processed; retry it unchanged later")
}

func (m *Middleware[TTx]) reused(w http.ResponseWriter) {
	m.problem(w, http.StatusUnprocessableEntity, CodeKeyReused, "this Idempotency-Key was used with a different request; use a new key for a new request")
}

const (
	notDone    = "the request was not carried out; retry it with the same Idempotency-Key"
	notRecords = "the request was carried out but its response could not be recorded"
)

func (m *Middleware[TTx]) internal(w http.ResponseWriter, r *http.Request, err error, detail string) {
	m.onError(r, err)
	m.problem(w, http.StatusInternalServerError, CodeInternal, detail)
}
