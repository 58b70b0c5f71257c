package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func runDedupe[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		req := dedupe.Request{Scope: "payments", Key: "order-1"}
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var res sqlonce.Result
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				res, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
					return db.Tx(tx).LedgerInsert(ctx, req.Key, 100)
				})
				return err
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
		}
		n, err := db.Pool().LedgerCountByRef(ctx, req.Key)
		must(t, err)
		if n != 1 {
			t.Fatalf("ledger rows for %s = %d, want 1", req.Key, n)
		}
	})

	t.Run("RaceSameKey", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, Racers+4)
				store, err := dedupe.New(db.Driver())
				must(t, err)
				const keys = 4
				var c counter
				errs := race(Racers, func(i int) error {
					key := fmt.Sprintf("k-%d", i%keys)
					_, err := retryTx(ctx, db, iso, func(tx TTx) error {
						res, err := store.Do(ctx, tx, dedupe.Request{Scope: "race", Key: key}, func(ctx context.Context) error {
							return db.Tx(tx).LedgerInsert(ctx, key, 1)
						})
						if err == nil {
							defer c.add(res) // counted only if the commit follows
						}
						return err
					})
					return err
				})
				noErrors(t, errs)
				per, err := db.Pool().LedgerCountPerRef(ctx)
				must(t, err)
				for k := range keys {
					key := fmt.Sprintf("k-%d", k)
					if per[key] != 1 {
						t.Errorf("%s: %d ledger rows, want exactly 1", key, per[key])
					}
				}
				t.Logf("%s: %s", iso, &c)
			})
		}
	})

	t.Run("InvalidKey", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		for _, req := range []dedupe.Request{
			{Scope: "s", Key: ""},
			{Scope: "", Key: "k"},
			{Scope: "s", Key: string(make([]byte, sqlonce.MaxKeyLen+1))},
			{Scope: "s", Key: "\xff"},
			{Scope: "s", Key: "a\x00b"},
		} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := store.Do(ctx, tx, req, func(ctx context.Context) error { return nil })
				return err
			})
			if !errors.Is(err, sqlonce.ErrInvalidKey) {
				t.Errorf("%q/%q: got %v, want ErrInvalidKey", req.Scope, req.Key, err)
			}
		}
		n, err := db.KeyCount(ctx)
		must(t, err)
		if n != 0 {
			t.Fatalf("%d keys left behind", n)
		}
	})
}
