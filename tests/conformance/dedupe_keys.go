package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runDedupeKeys: Store.Inspect reads a key as support needs it, and
// Store.Forget deletes it so that the next claim runs the work again,
// never a lease that holds unless told, never a key of another scope or
// namespace. The database's clock is pinned.
func runDedupeKeys[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const ttl = time.Hour
	setup := func(t *testing.T) (context.Context, harness.DB[TTx], *dedupe.Store[TTx], time.Time) {
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(ttl))
		must(t, err)
		return ctxT(t), db, s, clockBase()
	}
	inspect := func(t *testing.T, ctx context.Context, s *dedupe.Store[TTx], scope, key string, want dedupe.KeyState) dedupe.KeyInfo {
		t.Helper()
		info, err := s.Inspect(ctx, scope, key)
		must(t, err)
		if info.State != want || info.Scope != scope || info.Key != key {
			t.Fatalf("inspect %s/%s: %+v, want state %v", scope, key, info, want)
		}
		return info
	}

	t.Run("InspectStates", func(t *testing.T) {
		ctx, db, s, t0 := setup(t)
		// Recorded by DoResponse, with a fingerprint and a response.
		req := dedupe.Request{Scope: "support", Key: "done", Fingerprint: dedupe.Fingerprint([]byte("body"))}
		_, err := doRecord(at(ctx, t0, 0), db, s, req, "receipt-42")
		must(t, err)
		info := inspect(t, at(ctx, t0, time.Minute), s, req.Scope, req.Key, dedupe.KeyDone)
		if !info.Created.Equal(t0) || !info.Expires.Equal(t0.Add(ttl)) || !info.LeaseUntil.IsZero() || info.Token <= 0 ||
			info.FingerprintSize != len(req.Fingerprint) || !info.HasResponse || info.ResponseSize != len("receipt-42") {
			t.Fatalf("done key %+v, want created %v, expires %v, no lease, fingerprint %d bytes, response 10 bytes", info, t0, t0.Add(ttl), len(req.Fingerprint))
		}
		inspect(t, at(ctx, t0, ttl), s, req.Scope, req.Key, dedupe.KeyExpired)

		// Recorded by Do: no fingerprint, no response.
		plain := dedupe.Request{Scope: "support", Key: "plain"}
		must(t, harness.WithTx(at(ctx, t0, 0), db, harness.Default, func(tx TTx) error {
			_, err := s.Do(at(ctx, t0, 0), tx, plain, func(context.Context) error { return nil })
			return err
		}))
		if info := inspect(t, at(ctx, t0, 0), s, plain.Scope, plain.Key, dedupe.KeyDone); info.FingerprintSize != 0 || info.HasResponse || info.ResponseSize != 0 {
			t.Fatalf("Do's key %+v, want no fingerprint and no response", info)
		}

		// A lease: held, then lapsed; completed, done with a response.
		lreq := dedupe.Request{Scope: "support", Key: "lease"}
		l, res, err := s.Claim(at(ctx, t0, 0), lreq, time.Minute)
		wantLease(t, "claim", lreq, l, res, err)
		info = inspect(t, at(ctx, t0, 30*time.Second), s, lreq.Scope, lreq.Key, dedupe.KeyLeased)
		if !info.LeaseUntil.Equal(t0.Add(time.Minute)) || info.Token != l.Token || info.HasResponse {
			t.Fatalf("leased key %+v, want lease until %v with token %d and no response", info, t0.Add(time.Minute), l.Token)
		}
		inspect(t, at(ctx, t0, time.Minute), s, lreq.Scope, lreq.Key, dedupe.KeyLapsed)
		must(t, s.Complete(at(ctx, t0, 2*time.Minute), l, []byte{}))
		if info := inspect(t, at(ctx, t0, 2*time.Minute), s, lreq.Scope, lreq.Key, dedupe.KeyDone); !info.LeaseUntil.IsZero() || !info.HasResponse || info.ResponseSize != 0 {
			t.Fatalf("completed lease %+v, want no deadline and an empty response", info)
		}
		if got := dedupe.KeyLapsed.String(); got != "lapsed" {
			t.Fatalf("KeyLapsed.String() = %q", got)
		}
	})

	t.Run("ForgetLetsTheWorkRunAgain", func(t *testing.T) {
		ctx, db, s, t0 := setup(t)
		req := dedupe.Request{Scope: "support", Key: "retry-me"}
		_, err := doRecord(at(ctx, t0, 0), db, s, req, "old answer")
		must(t, err)
		must(t, s.Forget(at(ctx, t0, time.Minute), req.Scope, req.Key))
		_, err = s.Inspect(ctx, req.Scope, req.Key)
		wantErr(t, "inspect after forget", err, sqlonce.ErrNotFound)
		wantErr(t, "forget again", s.Forget(ctx, req.Scope, req.Key), sqlonce.ErrNotFound)
		res, err := doRecord(at(ctx, t0, 2*time.Minute), db, s, req, "new answer")
		want := "new answer"
		wantOutcome(t, "after forget", res, err, sqlonce.FirstRun, &want)
		ddLedger(t, db, req.Key, 2)
	})

	t.Run("ForgetLeases", func(t *testing.T) {
		ctx, db, s, t0 := setup(t)
		req := dedupe.Request{Scope: "support", Key: "stuck"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, 10*time.Minute)
		wantLease(t, "claim", req, l, res, err)
		// A lease that holds is not forgotten unless asked.
		wantErr(t, "forget a held lease", s.Forget(at(ctx, t0, time.Minute), req.Scope, req.Key), sqlonce.ErrInProgress)
		inspect(t, at(ctx, t0, time.Minute), s, req.Scope, req.Key, dedupe.KeyLeased)
		must(t, s.Forget(at(ctx, t0, time.Minute), req.Scope, req.Key, dedupe.ForgetLeased()))
		wantErr(t, "the holder's Complete", s.Complete(at(ctx, t0, 2*time.Minute), l, []byte("late")), sqlonce.ErrLeaseLost)
		if _, ok, err := db.Key(ctx, req.Scope, req.Key); err != nil || ok {
			t.Fatalf("forgotten lease: row=%v err=%v", ok, err)
		}
		// A lapsed lease needs no asking.
		l, res, err = s.Claim(at(ctx, t0, 3*time.Minute), req, time.Minute)
		wantLease(t, "claim again", req, l, res, err)
		must(t, s.Forget(at(ctx, t0, 4*time.Minute), req.Scope, req.Key))
		wantErr(t, "the lapsed holder's Extend", s.Extend(at(ctx, t0, 5*time.Minute), l, time.Minute), sqlonce.ErrLeaseLost)
		ddKeys(t, db, 0)
	})

	t.Run("NeverAnotherScopeOrNamespace", func(t *testing.T) {
		ctx, db, s, t0 := setup(t)
		_, err := doRecord(at(ctx, t0, 0), db, s, dedupe.Request{Scope: "alice", Key: "k"}, "alice's")
		must(t, err)
		_, err = s.Inspect(ctx, "bob", "k")
		wantErr(t, "inspect in another scope", err, sqlonce.ErrNotFound)
		wantErr(t, "forget in another scope", s.Forget(ctx, "bob", "k", dedupe.ForgetLeased()), sqlonce.ErrNotFound)
		inspect(t, at(ctx, t0, 0), s, "alice", "k", dedupe.KeyDone)

		// An inbox's message id, spelled as a dedupe key of the same
		// scope, is another namespace's: not read, not deleted.
		in, err := inbox.New(db.Driver(), "ledger-writer")
		must(t, err)
		handle := func() sqlonce.Result {
			res, err := in.Handle(ctx, "msg-1", func(ctx context.Context, tx TTx) error {
				return db.Tx(tx).LedgerInsert(ctx, "msg-1", 1)
			})
			must(t, err)
			return res
		}
		if res := handle(); !res.FirstRun() {
			t.Fatalf("first delivery: %v", res)
		}
		_, err = s.Inspect(ctx, "ledger-writer", "msg-1")
		wantErr(t, "inspect an inbox's id", err, sqlonce.ErrNotFound)
		wantErr(t, "forget an inbox's id", s.Forget(ctx, "ledger-writer", "msg-1", dedupe.ForgetLeased()), sqlonce.ErrNotFound)
		if res := handle(); !res.AlreadyDone() {
			t.Fatalf("redelivery after a dedupe Forget: %v, want AlreadyDone", res)
		}
		ddLedger(t, db, "msg-1", 1)
	})

	// A Forget racing the Run that records a fresh key answers as the key
	// was: not found before the Run commits, forgotten after. No lease is
	// ever taken, so it never answers that a lease holds the key (it did,
	// 4 to 35 times in 60 keys, when the Run committed between Forget's
	// delete, which did not see the row, and its read, which did).
	t.Run("ForgetRacingARun", func(t *testing.T) {
		const keys = 60
		for _, c := range []struct {
			name string
			opts []dedupe.Option
		}{
			{"Default", nil},
			{"FavorFirstRuns", []dedupe.Option{dedupe.WithFavor(dedupe.FavorFirstRuns)}},
			{"FavorRepeats", []dedupe.Option{dedupe.WithFavor(dedupe.FavorRepeats)}},
			{"NoWait", []dedupe.Option{dedupe.WithNoWait()}},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 16)
				s, err := dedupe.New(db.Driver(), c.opts...)
				must(t, err)
				var wg sync.WaitGroup
				errs := make(chan error, 2*keys)
				var forgotten, notFound atomic.Int64
				for i := range keys {
					key := fmt.Sprintf("fresh-%d", i)
					start, ran := make(chan struct{}), make(chan struct{})
					wg.Add(2)
					go func() {
						defer wg.Done()
						defer close(ran)
						<-start
						res, err := s.Run(ctx, dedupe.Request{Scope: "support", Key: key}, drWork(db, key, []byte("ok"), nil))
						// A Store that must not wait refuses while the
						// delete holds the key's gap lock (MariaDB): the
						// caller tries again.
						for n := 0; errors.Is(err, sqlonce.ErrInProgress) && n < 100; n++ {
							time.Sleep(time.Millisecond)
							res, err = s.Run(ctx, dedupe.Request{Scope: "support", Key: key}, drWork(db, key, []byte("ok"), nil))
						}
						if err != nil || !res.FirstRun() {
							errs <- fmt.Errorf("run %s: %v, %w", key, res, err)
						}
					}()
					go func() {
						defer wg.Done()
						<-start
						// Until it forgets the key: the run's commit meets
						// one of these calls.
						for {
							var after bool
							select {
							case <-ran:
								after = true
							default:
							}
							err := s.Forget(ctx, "support", key)
							switch {
							case err == nil:
								forgotten.Add(1)
								return
							case !errors.Is(err, sqlonce.ErrNotFound):
								errs <- fmt.Errorf("forget %s racing its run: %w (no lease was taken)", key, err)
								return
							case after:
								errs <- fmt.Errorf("forget %s after its run: %w", key, err)
								return
							}
							notFound.Add(1)
						}
					}()
					close(start)
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if t.Failed() {
					return
				}
				// Every run recorded its key once, and every key was
				// forgotten.
				for i := range keys {
					ddLedger(t, db, fmt.Sprintf("fresh-%d", i), 1)
				}
				ddKeys(t, db, 0)
				t.Logf("%d keys forgotten, after %d answers of not found", forgotten.Load(), notFound.Load())
			})
		}
	})

	// Observed: a key not found is an answer, not an error to log as one.
	t.Run("Observed", func(t *testing.T) {
		ctx, db, _, t0 := setup(t)
		rec := &recorder{}
		s, err := dedupe.New(sqlonce.Observe(db.Driver(), rec))
		must(t, err)
		_, err = s.Inspect(ctx, "support", "missing")
		wantErr(t, "inspect a missing key", err, sqlonce.ErrNotFound)
		if e := rec.last(); e.Operation != "Inspect" || e.Status != sqlonce.EventOK || e.Err != nil {
			t.Fatalf("inspect of a missing key reported %+v, want done without an error", e)
		}
		req := dedupe.Request{Scope: "support", Key: "held"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		wantErr(t, "forget a held lease", s.Forget(at(ctx, t0, 0), req.Scope, req.Key), sqlonce.ErrInProgress)
		if e := rec.last(); e.Operation != "Forget" || e.Status != sqlonce.EventInProgress {
			t.Fatalf("forget of a held lease reported %+v, want in_progress", e)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx, db, s, _ := setup(t)
		_, err := s.Inspect(ctx, "", "k")
		wantErr(t, "inspect without a scope", err, sqlonce.ErrInvalidKey)
		wantErr(t, "forget without a key", s.Forget(ctx, "s", ""), sqlonce.ErrInvalidKey)
		wantErr(t, "nil option", s.Forget(ctx, "s", "k", nil), sqlonce.ErrInvalidArgument)
		wantNilHandleRefused(t, db.Driver())
	})
}
