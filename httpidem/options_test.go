package httpidem_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// WithKeyHeader takes a field name, WithKeyReuseStatus one of 422, 409
// and 400; anything else is refused by New, with an error naming the
// option. No SQL runs.
func TestContractOptionsValidated(t *testing.T) {
	drv := unconnected(t)
	principal := func(*http.Request) string { return "p" }
	for name, opt := range map[string]httpidem.Option{
		"empty header":       httpidem.WithKeyHeader(""),
		"header with space":  httpidem.WithKeyHeader("X Idempotency-Key"),
		"header with colon":  httpidem.WithKeyHeader("Idempotency-Key:"),
		"header not ASCII":   httpidem.WithKeyHeader("Idempotency-Schlüssel"),
		"reuse status 200":   httpidem.WithKeyReuseStatus(http.StatusOK),
		"reuse status 500":   httpidem.WithKeyReuseStatus(http.StatusInternalServerError),
		"reuse status 0":     httpidem.WithKeyReuseStatus(0),
		"reuse status 412":   httpidem.WithKeyReuseStatus(http.StatusPreconditionFailed),
		"reuse status -422":  httpidem.WithKeyReuseStatus(-422),
		"reuse status 42200": httpidem.WithKeyReuseStatus(42200),
	} {
		_, err := httpidem.New(drv, principal, opt)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "WithKeyHeader") && !strings.Contains(err.Error(), "WithKeyReuseStatus") {
			t.Errorf("%s: %v, want ErrInvalidArgument naming the option", name, err)
		}
	}
	// Valid choices are accepted.
	for name, opt := range map[string]httpidem.Option{
		"X-Idempotency-Key": httpidem.WithKeyHeader("x-idempotency-key"),
		"token characters":  httpidem.WithKeyHeader("Request-Id.v2_~"),
		"409":               httpidem.WithKeyReuseStatus(http.StatusConflict),
		"400":               httpidem.WithKeyReuseStatus(http.StatusBadRequest),
		"422":               httpidem.WithKeyReuseStatus(http.StatusUnprocessableEntity),
	} {
		if _, err := httpidem.New(drv, principal, opt); err != nil {
			t.Errorf("%s: %v, want it accepted", name, err)
		}
	}
}

// unconnected returns a driver on a pool that has not connected: New
// needs a handle, and these tests run no SQL.
func unconnected(t *testing.T) *pgxdriver.Driver {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://sqlonce@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	drv, err := pgxdriver.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return drv
}
