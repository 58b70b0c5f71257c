package sqlonce_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// A zero Driver (new(mysqldriver.Driver)) was not built by New: it has no
// handle and skipped New's checks (the dialect, SQLite's busy_timeout).
// Every strategy refuses it at construction, bare or observed, with an
// error saying to build it with New, rather than panicking in Do or
// sending one dialect's SQL to another's transaction. No SQL runs.
func TestZeroDriverRefused(t *testing.T) {
	checkZero[pgx.Tx](t, "pgxdriver", new(pgxdriver.Driver))
	checkZero[*sql.Tx](t, "pgsqldriver", new(pgsqldriver.Driver))
	checkZero[*sql.Tx](t, "mysqldriver", new(mysqldriver.Driver))
	checkZero[*sql.Tx](t, "sqlitedriver", new(sqlitedriver.Driver))
}

func checkZero[TTx any](t *testing.T, name string, zero sqlonce.Driver[TTx]) {
	t.Helper()
	for _, d := range []sqlonce.Driver[TTx]{zero, sqlonce.Observe(zero, sqlonce.ObserverFunc(func(context.Context, sqlonce.Event) {}))} {
		if d.Engine() != nil {
			t.Errorf("%s: a zero Driver has an engine", name)
		}
		for what, err := range map[string]error{
			"dedupe.New": func() error { _, err := dedupe.New(d); return err }(),
			"token.New":  func() error { _, err := token.New(d); return err }(),
			"unique.New": func() error { _, err := unique.New(d); return err }(),
			"inbox.New":  func() error { _, err := inbox.New(d, "consumer"); return err }(),
			"outbox.New": func() error { _, err := outbox.New(d); return err }(),
		} {
			if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), name+".New") {
				t.Errorf("%s %s: %v, want ErrInvalidArgument saying to build it with %s.New", name, what, err, name)
			}
		}
	}
}
