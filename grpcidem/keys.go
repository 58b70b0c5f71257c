package grpcidem

import (
	"context"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
)

// Inspect reads the key a client sent in the key metadata, for the
// caller principal names (what the principal func of New returned for the
// client's calls), on the driver's database handle: to answer a
// customer's "why did my retry get the old answer?". info.Scope is
// principal. It returns an error matching sqlonce.ErrNotFound when there
// is no such key (never sent, expired and purged, forgotten, or in a
// transaction that has not committed yet). Never an httpidem key.
func (i *Interceptor[TTx]) Inspect(ctx context.Context, principal, key string) (dedupe.KeyInfo, error) {
	return i.keys().Inspect(ctx, principal, key)
}

// Forget deletes the key a client sent, for the caller principal names,
// as Inspect finds it, so that the client's next call with the key runs
// the handler again. A key that does not exist is an error matching
// sqlonce.ErrNotFound. opts are dedupe.Store.Forget's (dedupe.ForgetLeased
// changes nothing here: the interceptor takes no leases). What the
// handler did is not undone.
func (i *Interceptor[TTx]) Forget(ctx context.Context, principal, key string, opts ...dedupe.ForgetOption) error {
	return i.keys().Forget(ctx, principal, key, opts...)
}

// keys reads and deletes the client keys of the interceptor's table.
func (i *Interceptor[TTx]) keys() idem.Keys[TTx] {
	return idem.Keys[TTx]{Store: i.runner.Store, Observer: i.observer, Strategy: "grpcidem", Kind: 'g'}
}
