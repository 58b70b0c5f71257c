package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/token"
)

// rawDB opens a database/sql handle on db's database, for reads of
// sqlonce's own tables that the harness has no method for. The drivers are
// registered by the harness's imports.
func rawDB[TTx any](t testing.TB, db harness.DB[TTx]) *sql.DB {
	t.Helper()
	name := map[string]string{"postgres": "pgx", "mysql": "mysql", "sqlite": "sqlite"}[db.Dialect()]
	if d, ok := any(db).(interface{ SQLDriverName() string }); ok {
		name = d.SQLDriverName() // lib/pq's DSN may not suit pgx (through PgBouncer)
	}
	if name == "" {
		t.Fatalf("no database/sql driver for dialect %q", db.Dialect())
	}
	raw, err := sql.Open(name, db.DSN())
	must(t, err)
	raw.SetMaxOpenConns(1)
	t.Cleanup(func() { raw.Close() })
	return raw
}

// consumeOnce runs Consume in a transaction of its own at iso and, on
// FirstRun, writes one ledger row with ref; retried while IsRetryable.
func consumeOnce[TTx any](ctx context.Context, db harness.DB[TTx], s *token.Store[TTx], iso harness.Isolation, scope, tok, ref string) (sqlonce.Result, error) {
	var res sqlonce.Result
	_, err := retryTx(ctx, db, iso, func(tx TTx) error {
		var err error
		res, err = s.Consume(ctx, tx, scope, tok)
		if err != nil || !res.FirstRun() {
			return err
		}
		return db.Tx(tx).LedgerInsert(ctx, ref, 1)
	})
	return res, err
}

func runToken[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("IssueConsumeRepeat", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		tok, err := s.Issue(ctx, "checkout:alice")
		must(t, err)
		if len(tok) != token.Len {
			t.Fatalf("token %d characters, want %d", len(tok), token.Len)
		}
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			res, err := consumeOnce(ctx, db, s, harness.Default, "checkout:alice", tok, "order-1")
			wantOutcome(t, fmt.Sprintf("consume %d", i), res, err, want, nil)
		}
		ddLedger(t, db, "order-1", 1)

		// A second token is another operation: its own first run.
		tok2, err := s.Issue(ctx, "checkout:alice")
		must(t, err)
		if tok2 == tok {
			t.Fatal("two Issue calls returned the same token")
		}
		res, err := consumeOnce(ctx, db, s, harness.Default, "checkout:alice", tok2, "order-2")
		wantOutcome(t, "second token", res, err, sqlonce.FirstRun, nil)
		ddLedger(t, db, "order-2", 1)
	})

	t.Run("StoresOnlyTheHash", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		tok, err := s.Issue(ctx, "reset-password:u1")
		must(t, err)
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		must(t, err)
		if len(raw) != 32 {
			t.Fatalf("token holds %d bytes, want 32", len(raw))
		}
		want := sha256.Sum256(raw)

		rows, err := rawDB(t, db).QueryContext(ctx, "SELECT token_hash, scope FROM sqlonce_tokens")
		must(t, err)
		defer rows.Close()
		n := 0
		for rows.Next() {
			var h, scope []byte
			must(t, rows.Scan(&h, &scope))
			n++
			if !bytes.Equal(h, want[:]) {
				t.Fatalf("stored hash %x, want SHA-256 of the token %x", h, want)
			}
			if bytes.Contains(h, raw) || bytes.Contains(h, []byte(tok)) || string(scope) != "reset-password:u1" {
				t.Fatalf("row (%x, %q) holds the token or the wrong scope", h, scope)
			}
		}
		must(t, rows.Err())
		if n != 1 {
			t.Fatalf("%d token rows, want 1", n)
		}
	})

	t.Run("UnknownToken", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		issued, err := s.Issue(ctx, "form")
		must(t, err)
		// Well formed but never issued; the issued one with one character
		// changed; not base64url; wrong lengths; the base64 spelling with a
		// non-zero unused low bit, which decodes to the same bytes without
		// Strict.
		other := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
		flipped := []byte(issued)
		flipped[0] ^= 'A' ^ 'B'
		if flipped[0] == issued[0] {
			t.Fatal("flip changed nothing")
		}
		// 32 bytes fill 43 characters but 2 bits: the last character's two
		// low bits are zero in the one canonical spelling.
		last := strings.IndexByte(base64URL, issued[len(issued)-1])
		nonCanonical := issued[:len(issued)-1] + string(base64URL[last|1])
		for name, tok := range map[string]string{
			"never issued": other,
			"one changed":  string(flipped),
			"not base64":   strings.Repeat("!", token.Len),
			"too short":    issued[:token.Len-1],
			"too long":     issued + "A",
			"empty":        "",
			"padded":       issued[:token.Len-1] + "=",
		} {
			res, err := consumeOnce(ctx, db, s, harness.Default, "form", tok, "never")
			if !errors.Is(err, token.ErrUnknown) {
				t.Errorf("%s: got (%v, %v), want ErrUnknown", name, res.Outcome, err)
			}
		}
		if last&3 != 0 || nonCanonical == issued {
			t.Fatalf("issued token %q does not end in a canonical character", issued)
		}
		res, err := consumeOnce(ctx, db, s, harness.Default, "form", nonCanonical, "never")
		if !errors.Is(err, token.ErrUnknown) {
			t.Errorf("non-canonical spelling: got (%v, %v), want ErrUnknown", res.Outcome, err)
		}
		ddLedger(t, db, "never", 0)
		// None of that consumed the issued token.
		res, err = consumeOnce(ctx, db, s, harness.Default, "form", issued, "issued")
		wantOutcome(t, "issued token", res, err, sqlonce.FirstRun, nil)
	})

	t.Run("OtherScope", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		tok, err := s.Issue(ctx, "transfer:alice")
		must(t, err)
		for _, scope := range []string{"transfer:mallory", "Transfer:alice", "transfer:alice ", "transfer:alic"} {
			_, err := consumeOnce(ctx, db, s, harness.Default, scope, tok, "transfer")
			if !errors.Is(err, token.ErrOtherScope) {
				t.Fatalf("scope %q: got %v, want ErrOtherScope", scope, err)
			}
		}
		ddLedger(t, db, "transfer", 0)
		res, err := consumeOnce(ctx, db, s, harness.Default, "transfer:alice", tok, "transfer")
		wantOutcome(t, "own scope", res, err, sqlonce.FirstRun, nil)
		// Consumed: other scopes still hear "other scope", never "done".
		_, err = consumeOnce(ctx, db, s, harness.Default, "transfer:mallory", tok, "transfer")
		if !errors.Is(err, token.ErrOtherScope) {
			t.Fatalf("consumed, other scope: got %v, want ErrOtherScope", err)
		}
		ddLedger(t, db, "transfer", 1)
	})

	t.Run("Expiry", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver(), token.WithTTL(time.Hour))
		must(t, err)
		t0 := clockBase()
		issue := func() string {
			tok, err := s.Issue(at(ctx, t0, 0), "form")
			must(t, err)
			return tok
		}
		live, late, consumed := issue(), issue(), issue()

		res, err := consumeOnce(at(ctx, t0, time.Hour-time.Microsecond), db, s, harness.Default, "form", live, "live")
		wantOutcome(t, "last microsecond", res, err, sqlonce.FirstRun, nil)
		_, err = consumeOnce(at(ctx, t0, time.Hour), db, s, harness.Default, "form", late, "late")
		if !errors.Is(err, token.ErrExpired) {
			t.Fatalf("at expiry: got %v, want ErrExpired", err)
		}
		res, err = consumeOnce(at(ctx, t0, time.Minute), db, s, harness.Default, "form", consumed, "consumed")
		wantOutcome(t, "consume", res, err, sqlonce.FirstRun, nil)
		res, err = consumeOnce(at(ctx, t0, time.Hour-time.Microsecond), db, s, harness.Default, "form", consumed, "consumed")
		wantOutcome(t, "repeat before expiry", res, err, sqlonce.AlreadyDone, nil)
		_, err = consumeOnce(at(ctx, t0, time.Hour), db, s, harness.Default, "form", consumed, "consumed")
		if !errors.Is(err, token.ErrExpired) {
			t.Fatalf("repeat after expiry: got %v, want ErrExpired", err)
		}
		ddLedger(t, db, "late", 0)
		ddLedger(t, db, "consumed", 1)

		// Purge: nothing before expiry, all three at it (consumed or not),
		// in batches; then the tokens are unknown.
		n, err := s.Purge(at(ctx, t0, time.Hour-time.Microsecond), 0)
		must(t, err)
		if n != 0 {
			t.Fatalf("purge before expiry removed %d", n)
		}
		n, err = s.Purge(at(ctx, t0, time.Hour), 2)
		must(t, err)
		if n != 3 {
			t.Fatalf("purge at expiry removed %d, want 3", n)
		}
		for _, tok := range []string{live, late, consumed} {
			_, err = consumeOnce(at(ctx, t0, time.Hour), db, s, harness.Default, "form", tok, "purged")
			if !errors.Is(err, token.ErrUnknown) {
				t.Fatalf("purged token: got %v, want ErrUnknown", err)
			}
		}
	})

	t.Run("RolledBackConsumeLeavesTokenLive", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		tok, err := s.Issue(ctx, "pay")
		must(t, err)
		crash := errors.New("crash after the business write")
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			res, err := s.Consume(ctx, tx, "pay", tok)
			if err != nil {
				return err
			}
			if !res.FirstRun() {
				return fmt.Errorf("outcome %v", res.Outcome)
			}
			if err := db.Tx(tx).LedgerInsert(ctx, "pay", 1); err != nil {
				return err
			}
			return crash
		})
		if !errors.Is(err, crash) {
			t.Fatal(err)
		}
		ddLedger(t, db, "pay", 0)
		res, err := consumeOnce(ctx, db, s, harness.Default, "pay", tok, "pay")
		wantOutcome(t, "retry after rollback", res, err, sqlonce.FirstRun, nil)
		res, err = consumeOnce(ctx, db, s, harness.Default, "pay", tok, "pay")
		wantOutcome(t, "repeat", res, err, sqlonce.AlreadyDone, nil)
		ddLedger(t, db, "pay", 1)
	})

	t.Run("IssueTxRolledBack", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := token.New(db.Driver())
		must(t, err)
		var tok string
		gone := errors.New("roll back")
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			tok, err = s.IssueTx(ctx, tx, "form")
			if err != nil {
				return err
			}
			return gone
		})
		if !errors.Is(err, gone) {
			t.Fatal(err)
		}
		_, err = consumeOnce(ctx, db, s, harness.Default, "form", tok, "x")
		if !errors.Is(err, token.ErrUnknown) {
			t.Fatalf("token of a rolled back IssueTx: got %v, want ErrUnknown", err)
		}
	})

	// A Consume that waits for another transaction's consumption of the
	// same token answers by how that one ended. On PostgreSQL READ
	// COMMITTED the waiting statement's own read of the token is its
	// snapshot, from before the consumption it waited for: the answer
	// comes from a read after it, never ErrStaleRead.
	t.Run("WaitsForConsumer", func(t *testing.T) {
		for _, end := range []string{"commit", "rollback"} {
			t.Run(end, func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 0)
				skipOnSQLite(t, db, sqliteNoKeyWait)
				s, err := token.New(db.Driver())
				must(t, err)
				tok, err := s.Issue(ctx, "wait")
				must(t, err)
				first, err := db.Begin(ctx, harness.Default)
				must(t, err)
				defer func() { _ = db.Rollback(ctx, first) }()
				res, err := s.Consume(ctx, first, "wait", tok)
				wantOutcome(t, "first", res, err, sqlonce.FirstRun, nil)
				must(t, db.Tx(first).LedgerInsert(ctx, "wait", 1))

				second, err := db.Begin(ctx, harness.Default)
				must(t, err)
				defer func() { _ = db.Rollback(ctx, second) }()
				secondID, err := db.ConnID(ctx, second)
				must(t, err)
				type answer struct {
					res sqlonce.Result
					err error
				}
				done := make(chan answer, 1)
				go func() {
					res, err := s.Consume(ctx, second, "wait", tok)
					if err == nil && res.FirstRun() {
						err = db.Tx(second).LedgerInsert(ctx, "wait", 1)
					}
					done <- answer{res, err}
				}()
				must(t, harness.WaitLockWait(ctx, db, secondID))
				want := sqlonce.AlreadyDone
				if end == "commit" {
					must(t, db.Commit(ctx, first))
				} else {
					must(t, db.Rollback(ctx, first))
					want = sqlonce.FirstRun
				}
				var a answer
				select {
				case a = <-done:
				case <-ctx.Done():
					t.Fatal("the second Consume still waits after the first transaction ended")
				}
				wantOutcome(t, "second, after the first's "+end, a.res, a.err, want, nil)
				must(t, db.Commit(ctx, second))
				ddLedger(t, db, "wait", 1)
			})
		}
	})

	// MySQL and MariaDB: a Consume that changed nothing reads why from its
	// statement's LAST_INSERT_ID, set only where it found the token in the
	// scope. A value the session set before (the application's own
	// LAST_INSERT_ID(expr), an insert's id) is never taken for an answer,
	// and a first run leaves it as it was.
	t.Run("SessionLastInsertID", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 1)
		if db.Dialect() != "mysql" {
			t.Skip("LAST_INSERT_ID is MySQL's")
		}
		s, err := token.New(db.Driver())
		must(t, err)
		tok, err := s.Issue(ctx, "lid")
		must(t, err)
		other, err := s.Issue(ctx, "lid:other")
		must(t, err)
		never := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
		lastID := func(tx TTx) int64 {
			t.Helper()
			var id int64
			must(t, any(tx).(*sql.Tx).QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&id))
			return id
		}
		for _, set := range []int64{2, 4, 6} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				must(t, db.TxExec(ctx, tx, fmt.Sprintf("DO LAST_INSERT_ID(%d)", set)))
				if _, err := s.Consume(ctx, tx, "lid", never); !errors.Is(err, token.ErrUnknown) {
					t.Errorf("LAST_INSERT_ID %d, unknown token: got %v, want ErrUnknown", set, err)
				}
				if _, err := s.Consume(ctx, tx, "lid", other); !errors.Is(err, token.ErrOtherScope) {
					t.Errorf("LAST_INSERT_ID %d, other scope: got %v, want ErrOtherScope", set, err)
				}
				return nil
			})
			must(t, err)
		}
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			must(t, db.TxExec(ctx, tx, "DO LAST_INSERT_ID(4)"))
			res, err := s.Consume(ctx, tx, "lid", tok)
			wantOutcome(t, "first run", res, err, sqlonce.FirstRun, nil)
			if id := lastID(tx); id != 4 {
				t.Errorf("LAST_INSERT_ID() after a first run: %d, want 4 as the session set it", id)
			}
			return nil
		})
		must(t, err)
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			must(t, db.TxExec(ctx, tx, "DO LAST_INSERT_ID(0)"))
			res, err := s.Consume(ctx, tx, "lid", tok)
			wantOutcome(t, "repeat", res, err, sqlonce.AlreadyDone, nil)
			return nil
		})
		must(t, err)
	})

	t.Run("Race", func(t *testing.T) {
		runLevels(t, f, Racers+4, func(t *testing.T, db harness.DB[TTx], iso harness.Isolation) {
			ctx := ctxT(t)
			s, err := token.New(db.Driver())
			must(t, err)
			// Every racer submits the same token: 32 on one row.
			const tokens = 1
			toks := make([]string, tokens)
			for i := range toks {
				toks[i], err = s.Issue(ctx, "race")
				must(t, err)
			}
			var c counter
			var retries atomic.Int64
			errs := race(Racers, func(i int) error {
				tok, ref := toks[i%tokens], fmt.Sprintf("ref-%d", i%tokens)
				var res sqlonce.Result
				n, err := retryTx(ctx, db, iso, func(tx TTx) error {
					var err error
					res, err = s.Consume(ctx, tx, "race", tok)
					if err != nil || !res.FirstRun() {
						return err
					}
					return db.Tx(tx).LedgerInsert(ctx, ref, 1)
				})
				retries.Add(int64(n))
				c.add(res)
				return err
			})
			noErrors(t, errs)
			if c.first.Load() != tokens || c.done.Load() != int64(Racers)-tokens {
				t.Fatalf("%v, want first=%d done=%d", &c, tokens, Racers-tokens)
			}
			per, err := db.Pool().LedgerCountPerRef(ctx)
			must(t, err)
			for i := range tokens {
				if got := per[fmt.Sprintf("ref-%d", i)]; got != 1 {
					t.Fatalf("ref-%d: %d ledger rows, want exactly 1 (all: %v)", i, got, per)
				}
			}
			t.Logf("%v, %d transaction retries", &c, retries.Load())
		})
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		if _, err := token.New[TTx](nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil driver: %v", err)
		}
		for _, ttl := range []time.Duration{-time.Second, time.Nanosecond} {
			if _, err := token.New(db.Driver(), token.WithTTL(ttl)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Fatalf("TTL %v: %v", ttl, err)
			}
		}
		s, err := token.New(db.Driver())
		must(t, err)
		if _, err := s.Issue(ctx, ""); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("empty scope: %v", err)
		}
		tok, err := s.Issue(ctx, "s")
		must(t, err)
		if _, err := consumeOnce(ctx, db, s, harness.Default, strings.Repeat("s", sqlonce.MaxKeyLen+1), tok, "x"); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("long scope: %v", err)
		}
		// 0 is the default batch (see ZeroValues).
		for _, limit := range []int{-1, 100001} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := s.PurgeTx(ctx, tx, limit)
				return err
			})
			if !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Fatalf("purge limit %d: %v", limit, err)
			}
		}
	})
}

const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
