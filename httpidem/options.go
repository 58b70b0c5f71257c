package httpidem

import (
	"net/http"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
)

// Option configures a Middleware. New, NewWithTxFunc and NewLeased apply
// the options in order and fail on a bad one with an error that matches
// sqlonce.ErrInvalidArgument and names the option. Every option means the
// same in every mode; where a mode changes how it is carried out, its doc
// says so.
type Option func(*options) error

type options struct {
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
	noRepeat    time.Duration
	docs        string
	onError     func(*http.Request, error)
	keyHeader   string // Header unless WithKeyHeader
	reuseStatus int    // 422 unless WithKeyReuseStatus
	strictKey   bool   // WithStrictKey
}

// WithMethods sets the request methods the middleware handles (POST and
// PATCH by default); requests with other methods pass straight through.
func WithMethods(methods ...string) Option {
	return func(o *options) error {
		if len(methods) == 0 {
			return optionError("WithMethods", "no methods")
		}
		o.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			o.methods[strings.ToUpper(m)] = true
		}
		return nil
	}
}

// WithRequired decides which handled requests must carry a key (all by
// default; 400 without one). One it lets go without a key is not
// deduplicated, but still runs in transactional mode's transaction.
func WithRequired(required func(r *http.Request) bool) Option {
	return func(o *options) error {
		if required == nil {
			return optionError("WithRequired", "nil func")
		}
		o.required = required
		return nil
	}
}

// WithRoute names a request's route for its fingerprint: r.Pattern (the
// ServeMux pattern) by default, or r.URL.Path when there is none.
func WithRoute(route func(r *http.Request) string) Option {
	return func(o *options) error {
		if route == nil {
			return optionError("WithRoute", "nil func")
		}
		o.route = route
		return nil
	}
}

// WithFingerprintHeaders adds request header fields (Content-Type, an API
// version) to the fingerprint, which covers method, route, path, query and
// body.
func WithFingerprintHeaders(names ...string) Option {
	return func(o *options) error {
		o.fpHeaders = canonical(names)
		return nil
	}
}

// WithFingerprint puts fp's result (FingerprintJSON, say) in place of the
// path, query and body in the fingerprint; a request fp fails is answered
// 400 with CodeBodyUnreadable.
func WithFingerprint(fp FingerprintFunc) Option {
	return func(o *options) error {
		if fp == nil {
			return optionError("WithFingerprint", "nil func")
		}
		o.fingerprint = fp
		return nil
	}
}

// WithResponseHeaders sets the response header fields recorded and
// replayed (DefaultResponseHeaders by default).
func WithResponseHeaders(names ...string) Option {
	return func(o *options) error {
		o.respHeaders = canonical(names)
		return nil
	}
}

// WithRecord sets which answers are recorded (RecordAll by default). One
// not recorded leaves the key free for a retry and, in transactional
// mode, rolls the handler's writes back.
func WithRecord(record RecordFunc) Option {
	return func(o *options) error {
		if record == nil {
			return optionError("WithRecord", "nil func")
		}
		o.record = record
		return nil
	}
}

// WithMaxBody sets the largest request body accepted, in bytes
// (DefaultMaxBody for 0); a larger one is answered 413 before the handler
// runs.
func WithMaxBody(n int64) Option {
	return func(o *options) error {
		switch {
		case n < 0:
			return optionError("WithMaxBody", "%d is negative", n)
		case n == 0:
			n = DefaultMaxBody
		}
		o.maxBody = n
		return nil
	}
}

// WithTTL sets how long a key and its recorded answer live
// (dedupe.DefaultTTL, 24 hours, for 0); the key is free again after it.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) (err error) {
		o.ttl, err = idem.TTL("httpidem", ttl)
		return err
	}
}

// WithMaxResponseSize sets the largest answer body recorded, in bytes
// (dedupe.DefaultMaxResponseSize for 0, at most dedupe.MaxResponseSize).
// A larger answer is a 500 with CodeResponseTooLarge: in transactional
// mode rolled back, in lease mode done and recorded as that 500.
//
// The default is dedupe's, 64 KiB, not the largest limit as grpcidem's
// WithMaxResponseSize: an HTTP body has no bound of its own (a download,
// a report) and is buffered in memory to be recorded, and every replay
// carries it; an API that answers more raises the limit. A gRPC response
// is one message gRPC already bounds.
func WithMaxResponseSize(n int) Option {
	return func(o *options) (err error) {
		o.maxResponse, err = idem.MaxResponseSize("httpidem", n, dedupe.DefaultMaxResponseSize)
		return err
	}
}

// WithWait makes a duplicate wait up to d for the request that holds its
// key and then get its answer, instead of a 409 at once (0: no wait).
// Transactional mode waits on the key's row lock (whole seconds on MySQL).
func WithWait(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return optionError("WithWait", "%v is negative", d)
		}
		o.wait = d
		return nil
	}
}

// WithNoRepeatSubmit derives a key, living for window, for a request that
// carries none (an HTML form post): the same submit by the same caller
// within window runs once.
func WithNoRepeatSubmit(window time.Duration) Option {
	return func(o *options) error {
		if window <= 0 {
			return optionError("WithNoRepeatSubmit", "window %v is not positive", window)
		}
		o.noRepeat = window
		return nil
	}
}

// WithDocs points the problems' type (url#code) and a Link header with
// rel="describedby" at the API's documentation (about:blank by default).
func WithDocs(url string) Option {
	return func(o *options) error {
		o.docs = url
		return nil
	}
}

// WithErrorLog receives the errors the middleware cannot hand to anyone
// else (a database failure answered 500, a lease it could not complete or
// release); slog.Default logs them by default.
func WithErrorLog(log func(r *http.Request, err error)) Option {
	return func(o *options) error {
		if log == nil {
			return optionError("WithErrorLog", "nil func")
		}
		o.onError = log
		return nil
	}
}

// WithKeyHeader reads the key from the named header field (a valid field
// name, X-Idempotency-Key say) in place of Header; only that field is read.
func WithKeyHeader(name string) Option {
	return func(o *options) error {
		if !isToken(name) {
			return optionError("WithKeyHeader", "%q is not a valid header field name", name)
		}
		o.keyHeader = http.CanonicalHeaderKey(name)
		return nil
	}
}

// WithStrictKey accepts only the draft's form of the key field, a
// Structured Field String in double quotes (Idempotency-Key: "k"); a bare
// value (Idempotency-Key: k), accepted by default as the same key, is
// then answered 400 with CodeKeyInvalid.
func WithStrictKey() Option {
	return func(o *options) error {
		o.strictKey = true
		return nil
	}
}

// WithKeyReuseStatus sets the status answered to a key reused with
// another request (CodeKeyReused): 422 by default, or 409 or 400.
func WithKeyReuseStatus(status int) Option {
	return func(o *options) error {
		switch status {
		case http.StatusUnprocessableEntity, http.StatusConflict, http.StatusBadRequest:
			o.reuseStatus = status
			return nil
		}
		return optionError("WithKeyReuseStatus", "%d is not 422, 409 or 400", status)
	}
}

// WithReplayHook calls hook before a recorded answer is replayed, outside
// any transaction; what hook changes in rep goes to the client.
func WithReplayHook(hook func(r *http.Request, rep *Replay)) Option {
	return func(o *options) error {
		if hook == nil {
			return optionError("WithReplayHook", "nil func")
		}
		o.onReplay = hook
		return nil
	}
}
