package testclock

import (
	"context"
	"time"
)

type ctxKey struct{}

// With returns a context whose sqlonce queries use now as the database's
// current time.
func With(ctx context.Context, now time.Time) context.Context {
	return context.WithValue(ctx, ctxKey{}, now)
}

// Now returns the pinned time, or the zero time when none is pinned.
func Now(ctx context.Context) time.Time {
	t, _ := ctx.Value(ctxKey{}).(time.Time)
	return t
}
