package conformance

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/token"
)

// runZeroValues pins the one rule for zero values: an option, a TTL or a
// limit given 0 takes its default (a zero left in a config struct has no
// useful meaning there), a negative one is ErrInvalidArgument. Each zero
// is checked by what it does, on the database's clock pinned with
// testclock.
func runZeroValues[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("Dedupe", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(0))
		must(t, err)
		t0 := clockBase()
		req := dedupe.Request{Scope: "zero", Key: "ttl", TTL: 0}
		res, err := doRecord(at(ctx, t0, 0), db, s, req, "r")
		wantOutcome(t, "first", res, err, sqlonce.FirstRun, nil)
		res, err = doRecord(at(ctx, t0, dedupe.DefaultTTL-time.Second), db, s, req, "r")
		wantOutcome(t, "just before DefaultTTL", res, err, sqlonce.AlreadyDone, ptr("r"))
		res, err = doRecord(at(ctx, t0, dedupe.DefaultTTL+time.Second), db, s, req, "r")
		wantOutcome(t, "just after DefaultTTL", res, err, sqlonce.FirstRun, nil)

		// PurgeTx(0) purges a batch of DefaultPurgeBatch: the one expired key.
		_, err = doRecord(at(ctx, t0, -2*dedupe.DefaultTTL), db, s, dedupe.Request{Scope: "zero", Key: "old"}, "r")
		must(t, err)
		var n int64
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			n, err = s.PurgeTx(at(ctx, t0, 0), tx, 0)
			return err
		}))
		if n != 1 {
			t.Fatalf("PurgeTx(0) removed %d keys, want 1", n)
		}
		for name, call := range map[string]func() error{
			"WithTTL(-1)": func() error { _, err := dedupe.New(db.Driver(), dedupe.WithTTL(-1)); return err },
			"Request.TTL -1": func() error {
				_, err := doRecord(ctx, db, s, dedupe.Request{Scope: "zero", Key: "neg", TTL: -1}, "r")
				return err
			},
			"WithMaxResponseSize(-1)": func() error {
				_, err := dedupe.New(db.Driver(), dedupe.WithMaxResponseSize(-1))
				return err
			},
			"WithLockWait(-1)": func() error { _, err := dedupe.New(db.Driver(), dedupe.WithLockWait(-1)); return err },
			"Purge(-1)":        func() error { _, err := s.Purge(ctx, -1); return err },
			"PurgeTx(-1)": func() error {
				return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error { _, err := s.PurgeTx(ctx, tx, -1); return err })
			},
		} {
			if err := call(); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
	})

	t.Run("LockWaitZeroIsNoWait", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		skipOnSQLite(t, db, sqliteNoKeyWait)
		s, err := dedupe.New(db.Driver(), dedupe.WithLockWait(0))
		must(t, err)
		req := dedupe.Request{Scope: "zero", Key: "held"}
		holder, err := db.Begin(ctx, harness.Default)
		must(t, err)
		defer db.Rollback(ctx, holder)
		res, err := s.Do(ctx, holder, req, func(context.Context) error { return nil })
		wantOutcome(t, "holder", res, err, sqlonce.FirstRun, nil)
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			_, err := s.Do(ctx, tx, req, func(context.Context) error { return nil })
			return err
		})
		wantErr(t, "duplicate with WithLockWait(0) while the key is held", err, sqlonce.ErrInProgress)
	})

	t.Run("Token", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver(), token.WithTTL(0))
		must(t, err)
		t0 := clockBase()
		live, err := s.Issue(at(ctx, t0, 0), "zero")
		must(t, err)
		late, err := s.Issue(at(ctx, t0, 0), "zero")
		must(t, err)
		res, err := consumeOnce(at(ctx, t0, token.DefaultTTL-time.Second), db, s, harness.Default, "zero", live, "live")
		wantOutcome(t, "consumed just before DefaultTTL", res, err, sqlonce.FirstRun, nil)
		_, err = consumeOnce(at(ctx, t0, token.DefaultTTL+time.Second), db, s, harness.Default, "zero", late, "late")
		wantErr(t, "consumed just after DefaultTTL", err, token.ErrExpired)
		var n int64
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			n, err = s.PurgeTx(at(ctx, t0, 2*token.DefaultTTL), tx, 0)
			return err
		}))
		if n != 2 {
			t.Fatalf("PurgeTx(0) removed %d tokens, want 2", n)
		}
		if _, err := token.New(db.Driver(), token.WithTTL(-1)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("WithTTL(-1): %v", err)
		}
	})

	t.Run("Inbox", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "zero", inbox.WithTTL(0))
		must(t, err)
		t0 := clockBase()
		handle := func(d time.Duration) (sqlonce.Result, error) {
			return in.Handle(at(ctx, t0, d), "m1", func(context.Context, TTx) error { return nil })
		}
		res, err := handle(0)
		wantOutcome(t, "first delivery", res, err, sqlonce.FirstRun, nil)
		res, err = handle(inbox.DefaultTTL - time.Second)
		wantOutcome(t, "redelivery just before DefaultTTL", res, err, sqlonce.AlreadyDone, nil)
		res, err = handle(inbox.DefaultTTL + time.Second)
		wantOutcome(t, "redelivery just after DefaultTTL", res, err, sqlonce.FirstRun, nil)
		if _, err := inbox.New(db.Driver(), "zero", inbox.WithTTL(-1)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("WithTTL(-1): %v", err)
		}
	})

	t.Run("HTTPIdem", func(t *testing.T) {
		db := f(t, 0)
		principal := func(*http.Request) string { return "p" }
		if _, err := httpidem.New(db.Driver(), principal, httpidem.WithTTL(0), httpidem.WithMaxBody(0),
			httpidem.WithMaxResponseSize(0), httpidem.WithWait(0)); err != nil {
			t.Fatalf("zero options: %v", err)
		}
		for name, opt := range map[string]httpidem.Option{
			"WithTTL(-1)":             httpidem.WithTTL(-1),
			"WithMaxBody(-1)":         httpidem.WithMaxBody(-1),
			"WithMaxResponseSize(-1)": httpidem.WithMaxResponseSize(-1),
			"WithWait(-1)":            httpidem.WithWait(-1),
		} {
			if _, err := httpidem.New(db.Driver(), principal, opt); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
	})
}
