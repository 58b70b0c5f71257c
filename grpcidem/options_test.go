package grpcidem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// WithMetadataKey takes a metadata key for a text value; anything else is
// refused by New. No SQL runs.
func TestMetadataKeyValidated(t *testing.T) {
	drv := pgxdriver.New((*pgxpool.Pool)(nil))
	principal := func(context.Context) string { return "p" }
	for _, name := range []string{"", "x idempotency-key", "key:", "idempotency-key-bin", "grpc-idempotency-key", "schlüssel"} {
		if _, err := grpcidem.New(drv, principal, grpcidem.WithMetadataKey(name)); !errors.Is(err, sqlonce.ErrInvalidArgument) || errors.Is(err, sqlonce.ErrNoDB) {
			t.Errorf("%q: %v, want ErrInvalidArgument from the option", name, err)
		}
	}
	for _, name := range []string{"x-idempotency-key", "X-Idempotency-Key", "request_id.v2"} {
		if _, err := grpcidem.New(drv, principal, grpcidem.WithMetadataKey(name)); !errors.Is(err, sqlonce.ErrNoDB) {
			t.Errorf("%q: %v, want only ErrNoDB (no handle)", name, err)
		}
	}
}
