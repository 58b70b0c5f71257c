package grpcidem

import (
	"context"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Inspect reads the key a client sent in the key metadata, for the
// caller principal names (what the principal func of New returned for the
// client's calls), on the driver's database handle: to answer a
// customer's "why did my retry get the old answer?". info.Scope is
// principal. It returns an error matching sqlonce.ErrNotFound when there
// is no such key (never sent, expired and purged, forgotten, or in a
// transaction that has not committed yet). Never an httpidem key.
func (i *Interceptor[TTx]) Inspect(ctx context.Context, principal, key string) (info dedupe.KeyInfo, err error) {
	scope := idem.Scope('g', principal)
	op := obs.Start(i.observer, "grpcidem", "Inspect", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	info, err = i.runner.Store.Inspect(ctx, scope, key)
	info.Scope = principal
	return info, err
}

// Forget deletes the key a client sent, for the caller principal names,
// as Inspect finds it, so that the client's next call with the key runs
// the handler again. A key that does not exist is an error matching
// sqlonce.ErrNotFound. What the handler did is not undone.
func (i *Interceptor[TTx]) Forget(ctx context.Context, principal, key string) (err error) {
	scope := idem.Scope('g', principal)
	op := obs.Start(i.observer, "grpcidem", "Forget", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	return i.runner.Store.Forget(ctx, scope, key)
}
