package idem

import (
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

// OptionError is the error of a bad option of the transport pkg, which it
// names: it matches sqlonce.ErrInvalidArgument.
func OptionError(pkg, option, format string, args ...any) error {
	return fmt.Errorf("%w: "+pkg+": "+option+": "+format, append([]any{sqlonce.ErrInvalidArgument}, args...)...)
}

// TTL checks the value of pkg's WithTTL: dedupe.DefaultTTL for 0, a
// negative one refused.
func TTL(pkg string, ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < 0:
		return 0, OptionError(pkg, "WithTTL", "%v is negative", ttl)
	case ttl == 0:
		return dedupe.DefaultTTL, nil
	}
	return ttl, nil
}

// MaxResponseSize checks the value of pkg's WithMaxResponseSize: def for
// 0, at most dedupe.MaxResponseSize, a negative one refused.
func MaxResponseSize(pkg string, n, def int) (int, error) {
	switch {
	case n < 0 || n > dedupe.MaxResponseSize:
		return 0, OptionError(pkg, "WithMaxResponseSize", "%d is outside 0..%d", n, dedupe.MaxResponseSize)
	case n == 0:
		return def, nil
	}
	return n, nil
}
