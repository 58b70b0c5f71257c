package sqlonce

import (
	"context"
	"errors"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// ErrorType names the kind of err in a few fixed words, for a metric
// attribute or a log field where the message would be too varied: the
// sentinel it matches ("key_reuse", "in_progress", "lease_lost",
// "invalid_key", "invalid_argument", "response_too_large", "not_found",
// "invalid_transition", "too_many_rows", "stale_read", "commit_unknown",
// "read_only"), "canceled" or "deadline_exceeded" for a context's error,
// "lock_timeout" for a lock wait that gave up, "retryable" for any other
// error IsRetryable accepts (a deadlock, a serialization failure),
// "conn_lost" for a connection that broke, "other" for the rest, and ""
// for nil.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range errorTypes {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	c := driver.Classify(err)
	switch {
	case c.Has(driver.LockNotAvailable):
		return "lock_timeout"
	case c.Has(driver.Retryable):
		return "retryable"
	case c.Has(driver.ConnLost):
		return "conn_lost"
	}
	return "other"
}

var errorTypes = [...]struct {
	err  error
	name string
}{
	{ErrKeyReuse, "key_reuse"},
	{ErrInProgress, "in_progress"},
	{ErrLeaseLost, "lease_lost"},
	{ErrInvalidKey, "invalid_key"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrResponseTooLarge, "response_too_large"},
	{ErrNotFound, "not_found"},
	{ErrInvalidTransition, "invalid_transition"},
	{ErrTooManyRows, "too_many_rows"},
	{ErrStaleRead, "stale_read"},
	{ErrCommitUnknown, "commit_unknown"},
	{ErrReadOnly, "read_only"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}
