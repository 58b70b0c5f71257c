package httpidem

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
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
	fingerprint FingerprintFunc
	wait        time.Duration
	onReplay    func(*http.Request, *Replay)
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
	keyHeader   string // Header unless WithKeyHeader
	reuseStatus int    // 422 unless WithKeyReuseStatus
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

// WithRoute names the route a request belongs to, for the request
// fingerprint (keys are scoped by the caller alone: the same key sent to
// another route is answered 422).
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
// (DefaultMaxBody otherwise, and for 0; negative is an error). A larger
// one is answered 413 before the handler runs. The middleware reads the
// body to fingerprint it and hands the handler a copy to read.
func WithMaxBody(n int64) Option {
	return func(c *config) error {
		switch {
		case n < 0:
			return invalid("max body %d is negative", n)
		case n == 0:
			n = DefaultMaxBody
		}
		c.maxBody = n
		return nil
	}
}

// WithTTL sets how long a key and its recorded response live
// (dedupe.DefaultTTL, 24 hours, otherwise, and for 0; negative is an
// error). The draft asks servers to publish this expiration policy. After
// it, the key is free again.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) error {
		switch {
		case ttl < 0:
			return invalid("TTL %v is negative", ttl)
		case ttl == 0:
			ttl = dedupe.DefaultTTL
		}
		c.ttl = ttl
		return nil
	}
}

// WithMaxResponseSize sets the largest response body recorded, in bytes
// (dedupe.DefaultMaxResponseSize otherwise, and for 0; at most
// dedupe.MaxResponseSize). Only the body counts: the status and the
// recorded header fields are stored beside it, the whole record up to
// dedupe.MaxResponseSize. An answer that cannot be recorded is answered
// 500 with code CodeResponseTooLarge and reported to WithErrorLog; in
// transactional mode the handler's work rolls back and the key stays
// free, in lease mode the work is done and the key replays that problem.
// Size it above the handler's largest answer.
func WithMaxResponseSize(n int) Option {
	return func(c *config) error {
		switch {
		case n < 0 || n > dedupe.MaxResponseSize:
			return invalid("max response size %d is outside 0..%d", n, dedupe.MaxResponseSize)
		case n == 0:
			n = dedupe.DefaultMaxResponseSize
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
//
// The middleware cannot see whether run's COMMIT reached the database:
// with WithTxFunc an error run returns after the handler's work returned,
// other than one sqlonce.IsRetryable accepts, is answered 500 with
// CodeOutcomeUnknown, since the transaction may have committed. Without
// it the driver tells: only a COMMIT whose connection broke on the way
// (sqlonce.ErrCommitUnknown) is unknown, and an error the database
// answered (PostgreSQL's 25P02 for a transaction a failed statement left
// aborted, say) is a 500 with CodeInternal, nothing recorded.
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

// WithKeyHeader sets the request header field that carries the key, in
// place of [Header] (Idempotency-Key), for an API whose clients already
// send another, such as X-Idempotency-Key. The field's value is parsed
// as the draft says for Idempotency-Key (a Structured Field String), and
// the problems the middleware answers name the field. name must be a
// valid field name (an HTTP token); it is canonicalized
// (http.CanonicalHeaderKey). Only that field is read: a request that
// carries Idempotency-Key instead is a request without a key.
func WithKeyHeader(name string) Option {
	return func(c *config) error {
		if !isToken(name) {
			return invalid("key header %q is not a valid header field name", name)
		}
		c.keyHeader = http.CanonicalHeaderKey(name)
		return nil
	}
}

// isToken reports whether s is an RFC 9110 token, as a field name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// WithKeyReuseStatus sets the status code answered to a key used again
// with another request (another fingerprint, method or route), with
// problem code [CodeKeyReused]: 422 (Unprocessable Content, the draft's
// choice) by default, or 409 (Conflict) or 400 (Bad Request) for an API
// whose clients expect those. Any other code is an error. A 409 for a
// reuse carries no Retry-After: sending it again unchanged cannot
// succeed, unlike the 409 of a key whose request is still running
// ([CodeInProgress]), which clients tell apart by the problem's code.
func WithKeyReuseStatus(status int) Option {
	return func(c *config) error {
		switch status {
		case http.StatusUnprocessableEntity, http.StatusConflict, http.StatusBadRequest:
			c.reuseStatus = status
			return nil
		}
		return invalid("key reuse status %d is not 422, 409 or 400", status)
	}
}

// FingerprintFunc returns the part of a request's fingerprint that the
// application chooses, from the request and its body as read (r.Body is
// not to be read). Two requests with one key whose results differ are two
// requests: the second is answered 422.
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

// WithFingerprint sets which parts of a request count for its
// fingerprint: fp's result takes the place of the path, the query and the
// body. The method and the route always count (a key names one request),
// and so do the fields named with WithFingerprintHeaders. A request for
// which fp returns an error is answered 400 with code CodeBodyUnreadable,
// before the handler runs. FingerprintJSON is one such func.
func WithFingerprint(fp FingerprintFunc) Option {
	return func(c *config) error {
		if fp == nil {
			return invalid("nil fingerprint func")
		}
		c.fingerprint = fp
		return nil
	}
}

// FingerprintJSON is a FingerprintFunc for JSON APIs: the path, the query
// and the body as canonical JSON (dedupe.FingerprintJSON), so that the
// order of object keys and insignificant white space do not make a retry
// a different request. An empty body counts as no body; one that is not
// JSON is an error (400).
func FingerprintJSON(r *http.Request, body []byte) ([]byte, error) {
	canon := []byte(nil)
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		if canon, err = dedupe.FingerprintJSON(json.RawMessage(body)); err != nil {
			return nil, err
		}
	}
	return dedupe.Fingerprint([]byte(r.URL.EscapedPath()), []byte(r.URL.RawQuery), canon), nil
}

// WithWait makes a duplicate wait, for at most d, for the request that
// holds its key, instead of being answered 409 at once (the draft's
// "blocking" alternative): when the first request ends within d, the
// duplicate gets its recorded answer, or runs itself when that answer was
// not recorded; past d it is answered 409. In transactional mode the
// duplicate waits on the key's row lock, holding a connection (on
// MySQL/MariaDB d counts in whole seconds, rounded down, as
// dedupe.WithLockWait says; under one second it does not wait); in lease
// mode it asks again at growing intervals, up to 200ms, holding none. Keep
// d below the server's and the client's request timeouts. 0 waits not at
// all, as without the option; negative is an error.
func WithWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return invalid("wait %v is negative", d)
		}
		c.wait = d
		return nil
	}
}

// Replay is a recorded answer about to be replayed.
type Replay struct {
	// Status, Header and Body are the recorded answer's; the hook may
	// change them.
	Status int
	Header http.Header
	Body   []byte
}

// WithReplayHook calls hook before a recorded answer is replayed, with
// the request that repeated the key: to tell a replay from a first answer
// in the application (count it, log it), or to adjust it (a header that
// says when the first answer was made). Changes hook makes to rep go to
// the client; ReplayHeader is set after it. hook runs outside any
// transaction and must not write to the client itself.
func WithReplayHook(hook func(r *http.Request, rep *Replay)) Option {
	return func(c *config) error {
		if hook == nil {
			return invalid("nil replay hook")
		}
		c.onReplay = hook
		return nil
	}
}
