package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// nilTxs returns the nil transactions a caller can pass by mistake: the
// zero TTx (a nil *sql.Tx, a nil pgx.Tx interface) and, where TTx is an
// interface, one holding a nil pointer (a nil *pgxpool.Tx in a pgx.Tx).
func nilTxs[TTx any]() map[string]TTx {
	var zero TTx
	txs := map[string]TTx{"zero": zero}
	if typed, ok := any((*pgxpool.Tx)(nil)).(TTx); ok {
		txs["typed nil"] = typed
	}
	return txs
}

// runNilTx checks that every call taking the caller's transaction refuses
// a nil one with ErrInvalidArgument before any SQL runs. On MySQL a nil
// *sql.Tx once ran the claim on the driver's handle, committing the key
// outside any transaction; on PostgreSQL and SQLite it panicked.
func runNilTx[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	tokens, err := token.New(db.Driver())
	must(t, err)
	in, err := inbox.New(db.Driver(), "nil-consumer")
	must(t, err)
	ins := newInserter(t, db)

	// An expired key and an expired token, for the purges to leave alone;
	// a live token, for Consume to leave unconsumed.
	t0 := clockBase()
	past := at(ctx, t0, -48*time.Hour)
	_, err = doRecord(past, db, s, dedupe.Request{Scope: "nil", Key: "expired"}, "r")
	must(t, err)
	_, err = tokens.Issue(past, "nil-scope")
	must(t, err)
	live, err := tokens.Issue(ctx, "nil-scope")
	must(t, err)
	raw := rawDB(t, db)
	count := func(table string) int64 {
		var n int64
		must(t, raw.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	keysBefore, tokensBefore := count("sqlonce_keys"), count("sqlonce_tokens")

	ran := false
	work := func(context.Context) error { ran = true; return nil }
	req := dedupe.Request{Scope: "nil", Key: "k1"}
	for name, tx := range nilTxs[TTx]() {
		calls := map[string]func() error{
			"Do": func() error { _, err := s.Do(ctx, tx, req, work); return err },
			"DoResponse": func() error {
				_, err := s.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) { return nil, work(ctx) })
				return err
			},
			"DoJSON": func() error {
				_, _, err := dedupe.DoJSON(ctx, s, tx, req, func(ctx context.Context) (int, error) { return 1, work(ctx) })
				return err
			},
			"ClaimTx":    func() error { _, _, err := s.ClaimTx(ctx, tx, req, time.Minute); return err },
			"CompleteTx": func() error { return s.CompleteTx(ctx, tx, &dedupe.Lease{Scope: "nil", Key: "k1", Token: 1}, nil) },
			"ReleaseTx":  func() error { return s.ReleaseTx(ctx, tx, &dedupe.Lease{Scope: "nil", Key: "k1", Token: 1}) },
			"ExtendTx": func() error {
				return s.ExtendTx(ctx, tx, &dedupe.Lease{Scope: "nil", Key: "k1", Token: 1}, time.Minute)
			},
			"dedupe.PurgeTx": func() error { _, err := s.PurgeTx(ctx, tx, 10); return err },
			"unique.Insert": func() error {
				_, err := ins.Insert(ctx, tx, codeKey, work)
				return err
			},
			"unique.InsertOrGet": func() error {
				_, _, err := unique.InsertOrGet(ctx, ins, tx, codeKey,
					func(ctx context.Context) (int, error) { return 1, work(ctx) },
					func(ctx context.Context) (int, error) { return 1, work(ctx) })
				return err
			},
			"unique.InsertOne": func() error {
				_, err := ins.InsertOne(ctx, tx, codeKey, work)
				return err
			},
			"unique.InsertOneOrGet": func() error {
				_, _, err := unique.InsertOneOrGet(ctx, ins, tx, codeKey,
					func(ctx context.Context) (int, error) { return 1, work(ctx) },
					func(ctx context.Context) (int, error) { return 1, work(ctx) })
				return err
			},
			"token.IssueTx": func() error { _, err := tokens.IssueTx(ctx, tx, "nil-scope"); return err },
			"token.Consume": func() error { _, err := tokens.Consume(ctx, tx, "nil-scope", live); return err },
			"token.PurgeTx": func() error { _, err := tokens.PurgeTx(ctx, tx, 10); return err },
			"inbox.HandleTx": func() error {
				_, err := in.HandleTx(ctx, tx, "m1", work)
				return err
			},
		}
		for call, fn := range calls {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				err = fn()
			}()
			if !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("%s with a %s transaction: %v, want ErrInvalidArgument", call, name, err)
			}
			if ran {
				t.Errorf("%s with a %s transaction ran the work", call, name)
				ran = false
			}
		}
	}
	if n := count("sqlonce_keys"); n != keysBefore {
		t.Errorf("sqlonce_keys has %d rows after the nil-transaction calls, want %d", n, keysBefore)
	}
	if n := count("sqlonce_tokens"); n != tokensBefore {
		t.Errorf("sqlonce_tokens has %d rows after the nil-transaction calls, want %d", n, tokensBefore)
	}
	// The live token is still unconsumed.
	res, err := consumeOnce(ctx, db, tokens, harness.Default, "nil-scope", live, "nil-token")
	wantOutcome(t, "consume after the nil-transaction calls", res, err, sqlonce.FirstRun, nil)
}
