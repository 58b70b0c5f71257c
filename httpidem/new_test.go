package httpidem_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// New refuses a driver without a database handle where the mode needs
// one, instead of answering every request 500. No SQL runs: the check
// needs no server.
func TestNewRefusesADriverWithoutAHandle(t *testing.T) {
	principal := func(*http.Request) string { return "p" }
	pg := pgxdriver.New((*pgxpool.Pool)(nil))
	my := mysqldriver.New((*sql.DB)(nil))
	for name, err := range map[string]error{
		"pgx transactional": func() error { _, err := httpidem.New(pg, principal); return err }(),
		"pgx lease":         func() error { _, err := httpidem.New(pg, principal, httpidem.WithLease(time.Second)); return err }(),
		"mysql transactional": func() error {
			_, err := httpidem.New(my, principal)
			return err
		}(),
		"mysql lease with a tx func": func() error {
			_, err := httpidem.New(my, principal, httpidem.WithLease(time.Second),
				httpidem.WithTxFunc(func(context.Context, func(context.Context, *sql.Tx) error) error { return nil }))
			return err
		}(),
	} {
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || !errors.Is(err, sqlonce.ErrNoDB) {
			t.Errorf("%s: %v, want ErrInvalidArgument and ErrNoDB", name, err)
		}
	}
	// Transactional mode with the caller's own transactions needs no handle.
	if _, err := httpidem.New(pg, principal, httpidem.WithTxFunc(func(context.Context, func(context.Context, pgx.Tx) error) error { return nil })); err != nil {
		t.Fatalf("WithTxFunc on a driver without a handle: %v", err)
	}
}
