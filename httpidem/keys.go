package httpidem

import (
	"context"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
)

// Inspect reads the key a client sent in the key header, for the caller
// principal names (what the principal func of New returned for the
// client's requests), on the driver's database handle: to answer a customer's "why did my retry get the old
// answer?". Keys of requests run as steps are InspectSteps'; keys derived
// by WithNoRepeatSubmit are not reached. info.Scope is principal. It
// returns an error matching sqlonce.ErrNotFound when there is no such
// key (never sent, expired and purged, forgotten, or in a transaction
// that has not committed yet). Any Middleware on the same table reads the
// same keys, whatever its mode and options.
func (m *Middleware[TTx]) Inspect(ctx context.Context, principal, key string) (dedupe.KeyInfo, error) {
	return m.keys().Inspect(ctx, principal, key)
}

// Forget deletes the key a client sent, for the caller principal names,
// as Inspect finds it, so that the client's next request with the key
// runs the handler again. A lease that holds (NewLeased) is refused with
// an error matching sqlonce.ErrInProgress unless dedupe.ForgetLeased; a
// key that does not exist, with sqlonce.ErrNotFound. What the handler did
// is not undone.
func (m *Middleware[TTx]) Forget(ctx context.Context, principal, key string, opts ...dedupe.ForgetOption) error {
	return m.keys().Forget(ctx, principal, key, opts...)
}

// InspectSteps is Inspect for the key of a request run as steps (Steps):
// where its operation stands, as dedupe.Store.InspectSteps tells it.
func (m *Middleware[TTx]) InspectSteps(ctx context.Context, principal, key string) (dedupe.StepsInfo, error) {
	return m.keys().InspectSteps(ctx, principal, key)
}

// ForgetSteps is Forget for the key of a request run as steps (Steps):
// the next request with the key starts its operation from the first step.
func (m *Middleware[TTx]) ForgetSteps(ctx context.Context, principal, key string, opts ...dedupe.ForgetOption) error {
	return m.keys().ForgetSteps(ctx, principal, key, opts...)
}

// keys reads and deletes the client keys of the middleware's table.
func (m *Middleware[TTx]) keys() idem.Keys[TTx] {
	return idem.Keys[TTx]{Store: m.store, Observer: m.observer, Strategy: "httpidem", Kind: 'k'}
}
