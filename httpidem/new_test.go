package httpidem_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// Every constructor refuses a zero Driver, the only driver without a
// database handle (New refuses a nil one), with an error saying to build
// it with New, instead of answering every request 500. No SQL runs: the
// check needs no server.
func TestNewRefusesAZeroDriver(t *testing.T) {
	principal := func(*http.Request) string { return "p" }
	if _, err := pgxdriver.New((*pgxpool.Pool)(nil)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Fatalf("pgxdriver.New(nil pool): %v, want ErrInvalidArgument", err)
	}
	if _, err := mysqldriver.New(nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Fatalf("mysqldriver.New(nil): %v, want ErrInvalidArgument", err)
	}
	pg, my := new(pgxdriver.Driver), new(mysqldriver.Driver)
	pgRun := func(context.Context, func(context.Context, pgx.Tx) error) error { return nil }
	myRun := func(context.Context, func(context.Context, *sql.Tx) error) error { return nil }
	for name, err := range map[string]error{
		"pgx New":             func() error { _, err := httpidem.New(pg, principal); return err }(),
		"pgx NewLeased":       func() error { _, err := httpidem.NewLeased(pg, principal, time.Second); return err }(),
		"pgx NewWithTxFunc":   func() error { _, err := httpidem.NewWithTxFunc(pg, principal, pgRun); return err }(),
		"mysql New":           func() error { _, err := httpidem.New(my, principal); return err }(),
		"mysql NewLeased":     func() error { _, err := httpidem.NewLeased(my, principal, 0); return err }(),
		"mysql NewWithTxFunc": func() error { _, err := httpidem.NewWithTxFunc(my, principal, myRun); return err }(),
	} {
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || err == nil || !strings.Contains(err.Error(), "pgxdriver.New") {
			t.Errorf("%s: %v, want ErrInvalidArgument saying to build it with New", name, err)
		}
	}
}

// The mode is the constructor's: what a mode cannot use is refused when
// the Middleware is built, with an error naming the constructor. A
// TxFunc has no place in lease mode, and NewLeased has no parameter for
// one; the rest is checked here. Every Option means something in every
// mode, so each constructor takes each of them. No SQL runs.
func TestModeParametersRefused(t *testing.T) {
	principal := func(*http.Request) string { return "p" }
	pg := unconnected(t)
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"nil TxFunc":     {func() error { _, err := httpidem.NewWithTxFunc(pg, principal, nil); return err }(), "NewWithTxFunc"},
		"negative lease": {func() error { _, err := httpidem.NewLeased(pg, principal, -time.Second); return err }(), "NewLeased"},
		"lease under 1µs": {func() error {
			_, err := httpidem.NewLeased(pg, principal, time.Nanosecond)
			return err
		}(), "NewLeased"},
	} {
		if !errors.Is(c.err, sqlonce.ErrInvalidArgument) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidArgument naming %s", name, c.err, c.want)
		}
	}
	opts := []httpidem.Option{
		httpidem.WithMethods("POST"),
		httpidem.WithRequired(func(*http.Request) bool { return true }),
		httpidem.WithRoute(func(r *http.Request) string { return r.URL.Path }),
		httpidem.WithFingerprintHeaders("Content-Type"),
		httpidem.WithFingerprint(httpidem.FingerprintJSON),
		httpidem.WithResponseHeaders("Location"),
		httpidem.WithRecord(httpidem.RecordSuccess),
		httpidem.WithMaxBody(1 << 10),
		httpidem.WithTTL(time.Hour),
		httpidem.WithMaxResponseSize(1 << 10),
		httpidem.WithWait(time.Second),
		httpidem.WithNoRepeatSubmit(time.Second),
		httpidem.WithDocs("https://api.example.com/docs"),
		httpidem.WithErrorLog(func(*http.Request, error) {}),
		httpidem.WithKeyHeader("X-Idempotency-Key"),
		httpidem.WithKeyReuseStatus(http.StatusConflict),
		httpidem.WithReplayHook(func(*http.Request, *httpidem.Replay) {}),
	}
	run := func(context.Context, func(context.Context, pgx.Tx) error) error { return nil }
	if _, err := httpidem.NewWithTxFunc(pg, principal, run, opts...); err != nil {
		t.Errorf("NewWithTxFunc with every option: %v", err)
	}
	if _, err := httpidem.New(pg, principal, opts...); err != nil {
		t.Errorf("New with every option: %v", err)
	}
	if _, err := httpidem.NewLeased(pg, principal, time.Minute, opts...); err != nil {
		t.Errorf("NewLeased with every option: %v", err)
	}
}
