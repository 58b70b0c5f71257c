package conformance

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runNamespace checks that the packages sharing sqlonce_keys keep their
// keys apart: a dedupe scope, an inbox consumer name and the scope httpidem
// derives from a request may be spelled alike, and still none answers for
// another. Each case records a key through one package, then asks another
// with the same scope and key: it must run its work, not report
// AlreadyDone for work nobody did.
func runNamespace[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("InboxThenDedupe", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in := nsInbox(t, db, "x")
		res, err := in.Handle(ctx, "m1", nsWrite(db, "inbox"))
		wantOutcome(t, "inbox x/m1", res, err, sqlonce.FirstRun, nil)
		res, err = nsDo(ctx, t, db, "x", "m1", "dedupe")
		wantOutcome(t, "dedupe x/m1 after the inbox applied m1", res, err, sqlonce.FirstRun, nil)
		ddLedger(t, db, "dedupe", 1)
	})

	t.Run("DedupeThenInbox", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		res, err := nsDo(ctx, t, db, "x", "m1", "dedupe")
		wantOutcome(t, "dedupe x/m1", res, err, sqlonce.FirstRun, nil)
		in := nsInbox(t, db, "x")
		res, err = in.Handle(ctx, "m1", nsWrite(db, "inbox"))
		wantOutcome(t, "inbox x/m1 after dedupe recorded it", res, err, sqlonce.FirstRun, nil)
		ddLedger(t, db, "inbox", 1)
	})

	t.Run("HTTPThenDedupeAndInbox", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := startHTTP(t, db, nil)
		r := s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "x", ref: "http"})
		wantHTTPStatus(t, "first request", r, http.StatusCreated)
		scope := httpScope(ctx, t, db, "k1")

		res, err := nsDo(ctx, t, db, scope, "k1", "dedupe")
		wantOutcome(t, "dedupe with the request's scope and key", res, err, sqlonce.FirstRun, nil)
		in := nsInbox(t, db, scope)
		res, err = in.Handle(ctx, "k1", nsWrite(db, "inbox"))
		wantOutcome(t, "inbox with the request's scope and key", res, err, sqlonce.FirstRun, nil)
		ddLedger(t, db, "http", 1)
		ddLedger(t, db, "dedupe", 1)
		ddLedger(t, db, "inbox", 1)
	})

	t.Run("DedupeAndInboxThenHTTP", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := startHTTP(t, db, nil)
		// The scope depends on the caller and the route, not the key:
		// learn it from a first request.
		r := s.mustSend(t, req{user: "alice", keys: quoted("k0"), body: "x", ref: "http-k0"})
		wantHTTPStatus(t, "first request", r, http.StatusCreated)
		scope := httpScope(ctx, t, db, "k0")

		res, err := nsDo(ctx, t, db, scope, "k1", "dedupe")
		wantOutcome(t, "dedupe", res, err, sqlonce.FirstRun, nil)
		r = s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "x", ref: "http-k1"})
		wantHTTPStatus(t, "request with a key dedupe recorded", r, http.StatusCreated)
		if r.replayed() {
			t.Fatal("request with a key dedupe recorded was answered with a replay")
		}

		in := nsInbox(t, db, scope)
		res, err = in.Handle(ctx, "k2", nsWrite(db, "inbox"))
		wantOutcome(t, "inbox", res, err, sqlonce.FirstRun, nil)
		r = s.mustSend(t, req{user: "alice", keys: quoted("k2"), body: "x", ref: "http-k2"})
		wantHTTPStatus(t, "request with a key the inbox recorded", r, http.StatusCreated)
		if r.replayed() {
			t.Fatal("request with a key the inbox recorded was answered with a replay")
		}
		ddLedger(t, db, "http-k1", 1)
		ddLedger(t, db, "http-k2", 1)
	})

	t.Run("EachNamespaceStillDedupes", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in := nsInbox(t, db, "x")
		for _, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, err := nsDo(ctx, t, db, "x", "m1", "dedupe")
			wantOutcome(t, "dedupe", res, err, want, nil)
			res, err = in.Handle(ctx, "m1", nsWrite(db, "inbox"))
			wantOutcome(t, "inbox", res, err, want, nil)
		}
		ddLedger(t, db, "dedupe", 1)
		ddLedger(t, db, "inbox", 1)
		ddKeys(t, db, 2)
	})
}

func nsInbox[TTx any](t *testing.T, db harness.DB[TTx], consumer string) *inbox.Inbox[TTx] {
	t.Helper()
	in, err := inbox.New(db.Driver(), consumer)
	must(t, err)
	return in
}

func nsWrite[TTx any](db harness.DB[TTx], ref string) func(ctx context.Context, tx TTx) error {
	return func(ctx context.Context, tx TTx) error { return db.Tx(tx).LedgerInsert(ctx, ref, 1) }
}

// nsDo runs dedupe.Store.Do on scope/key in a transaction of its own; its
// work writes a ledger row under ref.
func nsDo[TTx any](ctx context.Context, t *testing.T, db harness.DB[TTx], scope, key, ref string) (sqlonce.Result, error) {
	t.Helper()
	store, err := dedupe.New(db.Driver())
	must(t, err)
	var res sqlonce.Result
	err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
		var err error
		res, err = store.Do(ctx, tx, dedupe.Request{Scope: scope, Key: key}, func(ctx context.Context) error {
			return db.Tx(tx).LedgerInsert(ctx, ref, 1)
		})
		return err
	})
	return res, err
}

// httpScope reads the scope httpidem stored the key under: the test does
// not depend on how httpidem spells it.
func httpScope[TTx any](ctx context.Context, t *testing.T, db harness.DB[TTx], key string) string {
	t.Helper()
	name := map[string]string{"postgres": "pgx", "mysql": "mysql", "sqlite": "sqlite"}[db.Dialect()]
	if d, ok := any(db).(interface{ SQLDriverName() string }); ok {
		name = d.SQLDriverName() // lib/pq's DSN may not suit pgx (through PgBouncer)
	}
	sdb, err := sql.Open(name, db.DSN())
	must(t, err)
	defer sdb.Close()
	q := "SELECT scope FROM sqlonce_keys WHERE idempotency_key = $1"
	if db.Dialect() != "postgres" {
		q = "SELECT scope FROM sqlonce_keys WHERE idempotency_key = ?"
	}
	var scope []byte
	err = sdb.QueryRowContext(ctx, q, key).Scan(&scope)
	if errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("httpidem stored no key %q", key)
	}
	must(t, err)
	return string(scope)
}
