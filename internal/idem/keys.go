package idem

import (
	"context"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Keys reads and deletes the keys clients sent to a transport, by the
// principal they were sent for: the transports' Inspect and Forget. Each
// call is observed as the transport's operation of the same name.
type Keys[TTx any] struct {
	Store    *dedupe.Store[TTx]
	Observer sqlonce.Observer
	Strategy string // the transport, as Events name it: "httpidem", "grpcidem"
	Kind     byte   // the Scope kind of the transport's client keys
}

// Inspect is dedupe.Store.Inspect for principal's key; info.Scope is
// principal.
func (k Keys[TTx]) Inspect(ctx context.Context, principal, key string) (dedupe.KeyInfo, error) {
	info, err := byPrincipal(ctx, k, "Inspect", principal, key, k.Store.Inspect)
	info.Scope = principal
	return info, err
}

// Forget is dedupe.Store.Forget for principal's key.
func (k Keys[TTx]) Forget(ctx context.Context, principal, key string, opts ...dedupe.ForgetOption) error {
	_, err := byPrincipal(ctx, k, "Forget", principal, key, func(ctx context.Context, scope, key string) (struct{}, error) {
		return struct{}{}, k.Store.Forget(ctx, scope, key, opts...)
	})
	return err
}

// InspectSteps is dedupe.Store.InspectSteps for principal's key;
// info.Scope is principal.
func (k Keys[TTx]) InspectSteps(ctx context.Context, principal, key string) (dedupe.StepsInfo, error) {
	info, err := byPrincipal(ctx, k, "InspectSteps", principal, key, k.Store.InspectSteps)
	info.Scope = principal
	return info, err
}

// ForgetSteps is dedupe.Store.ForgetSteps for principal's key.
func (k Keys[TTx]) ForgetSteps(ctx context.Context, principal, key string, opts ...dedupe.ForgetOption) error {
	_, err := byPrincipal(ctx, k, "ForgetSteps", principal, key, func(ctx context.Context, scope, key string) (struct{}, error) {
		return struct{}{}, k.Store.ForgetSteps(ctx, scope, key, opts...)
	})
	return err
}

// byPrincipal calls do with the scope of principal's client keys,
// observed as operation; sqlonce.ErrNotFound is an answer, not a failure.
func byPrincipal[TTx, I any](ctx context.Context, k Keys[TTx], operation, principal, key string, do func(ctx context.Context, scope, key string) (I, error)) (I, error) {
	scope := Scope(k.Kind, principal)
	op := obs.Start(k.Observer, k.Strategy, operation, scope, key)
	info, err := do(ctx, scope, key)
	return info, op.Done(ctx, err, sqlonce.ErrNotFound)
}
