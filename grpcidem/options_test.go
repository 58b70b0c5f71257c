package grpcidem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// WithMetadataKey takes a metadata key for a text value; anything else is
// refused by New, with an error naming the option. No SQL runs.
func TestMetadataKeyValidated(t *testing.T) {
	// A pool that has not connected: New needs a handle, and no SQL runs.
	pool, err := pgxpool.New(context.Background(), "postgres://sqlonce@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	drv, err := pgxdriver.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(context.Context) string { return "p" }
	for _, name := range []string{"", "x idempotency-key", "key:", "idempotency-key-bin", "grpc-idempotency-key", "schlüssel"} {
		_, err := grpcidem.New(drv, principal, grpcidem.WithMetadataKey(name))
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithMetadataKey") {
			t.Errorf("%q: %v, want ErrInvalidArgument naming WithMetadataKey", name, err)
		}
	}
	for _, name := range []string{"x-idempotency-key", "X-Idempotency-Key", "request_id.v2"} {
		if _, err := grpcidem.New(drv, principal, grpcidem.WithMetadataKey(name)); err != nil {
			t.Errorf("%q: %v, want it accepted", name, err)
		}
	}
}

// WithKeyReuseCode takes FailedPrecondition, InvalidArgument or
// AlreadyExists; codes a client retries on, and the rest, are refused by
// New with an error naming the option.
func TestKeyReuseCodeValidated(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://sqlonce@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	drv, err := pgxdriver.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(context.Context) string { return "p" }
	for _, c := range []codes.Code{codes.OK, codes.Aborted, codes.Unavailable, codes.Internal, codes.ResourceExhausted, codes.Code(99)} {
		_, err := grpcidem.New(drv, principal, grpcidem.WithKeyReuseCode(c))
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithKeyReuseCode") {
			t.Errorf("%v: %v, want ErrInvalidArgument naming WithKeyReuseCode", c, err)
		}
	}
	for _, c := range []codes.Code{codes.FailedPrecondition, codes.InvalidArgument, codes.AlreadyExists} {
		if _, err := grpcidem.New(drv, principal, grpcidem.WithKeyReuseCode(c)); err != nil {
			t.Errorf("%v: %v, want it accepted", c, err)
		}
	}
}

// WithMethods takes full method names, "/package.Service/Method", as
// grpc.UnaryServerInfo.FullMethod spells them; a short name would match
// no call and let repeats run twice, so New refuses it, naming the option.
func TestMethodsValidated(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://sqlonce@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	drv, err := pgxdriver.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(context.Context) string { return "p" }
	for _, methods := range [][]string{
		nil, {""}, {"Pay"}, {"pay.v1.Payments/Pay"}, {"/pay.v1.Payments"}, {"/pay.v1.Payments/"},
		{"//Pay"}, {"/pay.v1.Payments/Pay/x"}, {"/pay.v1.Payments/Pay", "Refund"}, {"/pay.v1.Payments/P ay"},
	} {
		_, err := grpcidem.New(drv, principal, grpcidem.WithMethods(methods...))
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithMethods") {
			t.Errorf("%q: %v, want ErrInvalidArgument naming WithMethods", methods, err)
		}
	}
	for _, methods := range [][]string{{"/pay.v1.Payments/Pay"}, {"/Greeter/SayHello", "/pay.v1.Payments/Refund"}} {
		if _, err := grpcidem.New(drv, principal, grpcidem.WithMethods(methods...)); err != nil {
			t.Errorf("%q: %v, want it accepted", methods, err)
		}
	}
}
