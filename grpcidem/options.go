package grpcidem

import (
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
)

// Option configures an Interceptor. New applies the options in order and
// fails on a bad one with an error that matches sqlonce.ErrInvalidArgument
// and names the option.
type Option func(*options) error

type options struct {
	methods     map[string]bool
	ttl         time.Duration
	maxResponse int
	key         string     // MetadataKey unless WithMetadataKey
	reuseCode   codes.Code // FailedPrecondition unless WithKeyReuseCode
}

// optionError is the error of a bad option, which it names.
func optionError(option, format string, args ...any) error {
	return idem.OptionError("grpcidem", option, format, args...)
}

// WithMethods sets the full method names the interceptor handles, as
// grpc.UnaryServerInfo.FullMethod spells them ("/pkg.Service/Method",
// the leading slash included); every unary method by default. Calls to
// other methods pass straight through, so a short name ("Pay",
// "pkg.Service/Pay") would match nothing: New refuses it, and an empty
// list.
func WithMethods(fullMethods ...string) Option {
	return func(o *options) error {
		if len(fullMethods) == 0 {
			return optionError("WithMethods", "no methods")
		}
		o.methods = make(map[string]bool, len(fullMethods))
		for _, m := range fullMethods {
			if !isFullMethod(m) {
				return optionError("WithMethods", `%q is not a full method name "/package.Service/Method"`, m)
			}
			o.methods[m] = true
		}
		return nil
	}
}

// isFullMethod reports whether m is "/service/method", service (with its
// package) and method non-empty and free of '/' and white space.
func isFullMethod(m string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return ok && strings.HasPrefix(m, "/") && service != "" && method != "" &&
		!strings.ContainsAny(method, "/ \t\r\n") && !strings.ContainsAny(service, " \t\r\n")
}

// WithMetadataKey reads the key from the named metadata key (lower-cased;
// a-z, 0-9, '-', '_', '.', not "grpc-" nor "-bin") in place of MetadataKey.
func WithMetadataKey(name string) Option {
	return func(o *options) error {
		name = strings.ToLower(name)
		ok := name != "" && !strings.HasPrefix(name, "grpc-") && !strings.HasSuffix(name, "-bin")
		for i := 0; ok && i < len(name); i++ {
			b := name[i]
			ok = 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.'
		}
		if !ok {
			return optionError("WithMetadataKey", "%q is not a metadata key for a text value", name)
		}
		o.key = name
		return nil
	}
}

// WithTTL sets how long a key and its recorded response live
// (dedupe.DefaultTTL, 24 hours, for 0).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) (err error) {
		o.ttl, err = idem.TTL("grpcidem", ttl)
		return err
	}
}

// WithMaxResponseSize sets the largest response recorded, in bytes, as a
// marshaled google.protobuf.Any (dedupe.MaxResponseSize for 0, and at
// most); a larger one fails ResourceExhausted and rolls back.
//
// The default is the largest limit, not dedupe.DefaultMaxResponseSize
// (64 KiB) as httpidem's WithMaxResponseSize: a gRPC response is one
// message that gRPC itself already bounds (4 MiB by default on the
// client), so a lower limit here would only fail calls gRPC carries;
// HTTP bodies have no such bound and are buffered to be recorded.
func WithMaxResponseSize(n int) Option {
	return func(o *options) (err error) {
		o.maxResponse, err = idem.MaxResponseSize("grpcidem", n, dedupe.MaxResponseSize)
		return err
	}
}

// WithKeyReuseCode sets the code a call gets when its key was used with
// another call (another method or request message): FailedPrecondition
// by default, or InvalidArgument or AlreadyExists, as httpidem's
// WithKeyReuseStatus chooses the status. Codes a client may retry on
// (Aborted, Unavailable) are refused: sending a reused key again cannot
// succeed.
func WithKeyReuseCode(code codes.Code) Option {
	return func(o *options) error {
		switch code {
		case codes.FailedPrecondition, codes.InvalidArgument, codes.AlreadyExists:
			o.reuseCode = code
			return nil
		}
		return optionError("WithKeyReuseCode", "%v is not FailedPrecondition, InvalidArgument or AlreadyExists", code)
	}
}
