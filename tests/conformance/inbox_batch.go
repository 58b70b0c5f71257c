package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runInboxBatch checks inbox.HandleBatch and dedupe.Store.DoBatch: each id
// of a batch applied once, whatever other batches and single calls share it.
func runInboxBatch[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("NewRepeatedMixed", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "batcher")
		must(t, err)
		var calls atomic.Int64
		apply := func(ids ...string) ([]sqlonce.Result, []string, error) {
			var got []string
			res, err := in.HandleBatch(ctx, ids, func(ctx context.Context, tx TTx, fresh []string) error {
				calls.Add(1)
				got = fresh
				for _, id := range fresh {
					if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
						return err
					}
				}
				return nil
			})
			return res, got, err
		}
		res, fresh, err := apply("m3", "m1", "m2", "m1")
		must(t, err)
		wantOutcomes(t, "first batch", res, "FFFD")
		if !slices.Equal(fresh, []string{"m3", "m1", "m2"}) {
			t.Fatalf("fresh %v, want the new ids once, in the batch's order", fresh)
		}
		res, _, err = apply("m2", "m4", "m1")
		must(t, err)
		wantOutcomes(t, "mixed batch", res, "DFD")
		before := calls.Load()
		res, _, err = apply("m1", "m2", "m3", "m4")
		must(t, err)
		wantOutcomes(t, "repeated batch", res, "DDDD")
		if calls.Load() != before {
			t.Fatal("fn ran for a batch of applied ids")
		}
		for _, id := range []string{"m1", "m2", "m3", "m4"} {
			ddLedger(t, db, id, 1)
		}
		// A single Handle sees what the batch applied.
		res1, err := in.Handle(ctx, "m2", func(context.Context, TTx) error { return errors.New("ran") })
		wantOutcome(t, "single after batch", res1, err, sqlonce.AlreadyDone, nil)
	})

	// Ids travel to some databases as one JSON array: each is stored as
	// given, whatever JSON escapes in it, as a single Handle finds it.
	t.Run("IdsStoredAsGiven", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "batcher")
		must(t, err)
		ids := []string{`q"uote`, `back\slash`, "tab\tnew\nline", "<&>", "ü€😀", `\u0041`, " "}
		res, err := in.HandleBatch(ctx, ids, func(context.Context, TTx, []string) error { return nil })
		must(t, err)
		wantOutcomes(t, "batch", res, strings.Repeat("F", len(ids)))
		for _, id := range ids {
			res1, err := in.Handle(ctx, id, func(context.Context, TTx) error { return errors.New("ran") })
			wantOutcome(t, fmt.Sprintf("Handle(%q) after the batch", id), res1, err, sqlonce.AlreadyDone, nil)
		}
		res, err = in.HandleBatch(ctx, ids, func(context.Context, TTx, []string) error { return errors.New("ran") })
		must(t, err)
		wantOutcomes(t, "repeated batch", res, strings.Repeat("D", len(ids)))
	})

	t.Run("FailureAppliesNothing", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "batcher")
		must(t, err)
		failed := errors.New("fn failed")
		_, err = in.HandleBatch(ctx, []string{"a", "b"}, func(ctx context.Context, tx TTx, _ []string) error {
			_ = db.Tx(tx).LedgerInsert(ctx, "a", 1)
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("got %v, want fn's error", err)
		}
		ddLedger(t, db, "a", 0)
		ddKeys(t, db, 0)
	})

	t.Run("ExpiredIdsRunAgain", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "batcher", inbox.WithTTL(time.Hour))
		must(t, err)
		t0 := clockBase()
		handle := func(ctx context.Context, ids ...string) []sqlonce.Result {
			res, err := in.HandleBatch(ctx, ids, func(context.Context, TTx, []string) error { return nil })
			must(t, err)
			return res
		}
		wantOutcomes(t, "first", handle(at(ctx, t0, 0), "x", "y"), "FF")
		wantOutcomes(t, "within TTL", handle(at(ctx, t0, 30*time.Minute), "x", "y", "z"), "DDF")
		wantOutcomes(t, "x and y expired", handle(at(ctx, t0, 80*time.Minute), "x", "y", "z"), "FFD")
	})

	// A lease that lapsed is taken over by a batch that holds its key, as
	// by a single claim: fn is given it, and the lease's holder can no
	// longer complete it.
	t.Run("LapsedLeaseTakenOver", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		t0 := clockBase()
		l, res1, err := s.Claim(at(ctx, t0, 0), dedupe.Request{Scope: "sc", Key: "lapsed"}, time.Minute)
		wantOutcome(t, "lease", res1, err, sqlonce.FirstRun, nil)
		later := at(ctx, t0, 2*time.Minute)
		var fresh []string
		var res []sqlonce.Result
		must(t, harness.WithTx(later, db, harness.Default, func(tx TTx) error {
			res, err = s.DoBatch(later, tx, "sc", []string{"new", "lapsed"}, func(ctx context.Context, ids []string) error {
				fresh = ids
				for _, id := range ids {
					if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
						return err
					}
				}
				return nil
			})
			return err
		}))
		wantOutcomes(t, "batch over a lapsed lease", res, "FF")
		if !slices.Equal(fresh, []string{"new", "lapsed"}) {
			t.Fatalf("fresh %v, want both ids", fresh)
		}
		wantErr(t, "Complete of the lapsed lease", s.Complete(later, l, []byte("late")), sqlonce.ErrLeaseLost)
		row, ok, err := db.Key(ctx, "sc", "lapsed")
		if err != nil || !ok || row.State != 1 || row.Response != nil {
			t.Fatalf("key after the takeover: %+v %v %v, want done with no response", row, ok, err)
		}
		ddLedger(t, db, "lapsed", 1)
		wantOutcomes(t, "repeat", batchOnce(t, later, db, s, "lapsed"), "D")
	})

	t.Run("LeasedOrFingerprintedKeyRefusesTheBatch", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		_, _, err = s.Claim(ctx, dedupe.Request{Scope: "sc", Key: "leased"}, time.Minute)
		must(t, err)
		res, err := doRecord(ctx, db, s, dedupe.Request{Scope: "sc", Key: "fp", Fingerprint: []byte{1}}, "r")
		wantOutcome(t, "fingerprinted", res, err, sqlonce.FirstRun, nil)
		batch := func(ids ...string) error {
			return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := s.DoBatch(ctx, tx, "sc", ids, func(context.Context, []string) error { return errors.New("ran") })
				return err
			})
		}
		if err := batch("a", "leased"); !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("leased key: %v, want ErrInProgress", err)
		}
		if err := batch("fp", "b"); !errors.Is(err, sqlonce.ErrKeyReuse) {
			t.Fatalf("fingerprinted key: %v, want ErrKeyReuse", err)
		}
		for _, k := range []string{"a", "b"} {
			if _, ok, err := db.Key(ctx, "sc", k); err != nil || ok {
				t.Fatalf("key %s left behind by a refused batch: %v %v", k, ok, err)
			}
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		in, err := inbox.New(db.Driver(), "batcher")
		must(t, err)
		nop := func(context.Context, TTx, []string) error { return nil }
		if _, err := in.HandleBatch(ctx, []string{"a", ""}, nop); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("empty id: %v", err)
		}
		if _, err := in.HandleBatch(ctx, make([]string, inbox.MaxBatch+1), nop); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("too many ids: %v", err)
		}
		if _, err := in.HandleBatch(ctx, []string{"a"}, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil fn: %v", err)
		}
		res, err := in.HandleBatch(ctx, nil, nop)
		if err != nil || len(res) != 0 {
			t.Fatalf("empty batch: %v %v", res, err)
		}
		ddKeys(t, db, 0)
	})

	// dedupe.Store.RunBatch, which HandleBatch is in the inbox's keys:
	// what a key recorded by DoResponse carries, a refused batch, fn's
	// error and fn ending the transaction, through the driver's own
	// transaction (through pgx with BEGIN riding with the claim).
	t.Run("RunBatch", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver())
		must(t, err)
		res1, err := doRecord(ctx, db, s, dedupe.Request{Scope: "sc", Key: "recorded"}, "its response")
		wantOutcome(t, "DoResponse", res1, err, sqlonce.FirstRun, nil)
		var given []string
		res, err := s.RunBatch(ctx, "sc", []string{"n2", "recorded", "n1", "n2"}, func(ctx context.Context, tx TTx, fresh []string) error {
			given = fresh
			for _, id := range fresh {
				if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
					return err
				}
			}
			return nil
		})
		must(t, err)
		wantOutcomes(t, "RunBatch", res, "FDFD")
		if !slices.Equal(given, []string{"n2", "n1"}) {
			t.Fatalf("fresh %v, want [n2 n1]", given)
		}
		if string(res[1].Response) != "its response" {
			t.Fatalf("recorded key: response %q, want DoResponse's", res[1].Response)
		}
		ddLedger(t, db, "n1", 1)
		ddLedger(t, db, "n2", 1)
		res, err = s.RunBatch(ctx, "sc", []string{"n1", "n2"}, func(context.Context, TTx, []string) error { return errors.New("ran") })
		must(t, err)
		wantOutcomes(t, "repeat", res, "DD")

		// fn's error: the claims and fn's writes roll back.
		failed := errors.New("fn failed")
		_, err = s.RunBatch(ctx, "sc", []string{"f1", "n1"}, func(ctx context.Context, tx TTx, _ []string) error {
			must(t, db.Tx(tx).LedgerInsert(ctx, "f1", 1))
			return failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("fn's error: got %v", err)
		}
		ddLedger(t, db, "f1", 0)
		if _, ok, err := db.Key(ctx, "sc", "f1"); err != nil || ok {
			t.Fatalf("key f1 left behind by a failed batch: %v %v", ok, err)
		}

		// A leased key refuses the batch; nothing of it stays.
		_, _, err = s.Claim(ctx, dedupe.Request{Scope: "sc", Key: "leased"}, time.Minute)
		must(t, err)
		_, err = s.RunBatch(ctx, "sc", []string{"a", "leased"}, func(context.Context, TTx, []string) error { return errors.New("ran") })
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("leased key: %v, want ErrInProgress", err)
		}
		if _, ok, err := db.Key(ctx, "sc", "a"); err != nil || ok {
			t.Fatalf("key a left behind by a refused batch: %v %v", ok, err)
		}

		// fn that ends the transaction it was given is a caller's bug.
		for _, end := range []string{"commit", "rollback"} {
			_, err = s.RunBatch(ctx, "sc", []string{"ended-" + end}, func(ctx context.Context, tx TTx, _ []string) error {
				if end == "commit" {
					return db.Commit(ctx, tx)
				}
				return db.Rollback(ctx, tx)
			})
			if !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Fatalf("fn's %s: %v, want ErrInvalidArgument", end, err)
			}
		}
		// The connection went back usable.
		res, err = s.RunBatch(ctx, "sc", []string{"after"}, func(context.Context, TTx, []string) error { return nil })
		must(t, err)
		wantOutcomes(t, "after", res, "F")

		if _, err := s.RunBatch(ctx, "sc", []string{"a"}, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil fn: %v", err)
		}
		if _, err := s.RunBatch(ctx, "", []string{"a"}, func(context.Context, TTx, []string) error { return nil }); !errors.Is(err, sqlonce.ErrInvalidKey) {
			t.Fatalf("empty scope: %v", err)
		}
	})

	// Racers consumers apply overlapping batches of the same ids, in
	// shuffled orders, together with single Handle calls: every id is
	// applied exactly once, and exactly one delivery reports it FirstRun.
	t.Run("ConcurrentOverlappingBatches", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		in, err := inbox.New(db.Driver(), "batcher")
		must(t, err)
		const ids, size = 60, 20
		var first [ids]atomic.Int64
		errs := race(Racers, func(i int) error {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range 3 {
				start := rng.IntN(ids)
				var batch []string
				for j := range size {
					batch = append(batch, fmt.Sprintf("id-%02d", (start+j)%ids))
				}
				rng.Shuffle(len(batch), func(a, b int) { batch[a], batch[b] = batch[b], batch[a] })
				if i%4 == 3 {
					batch = batch[:1] // some consumers handle one message at a time
				}
				var res []sqlonce.Result
				var err error
				for attempt := 0; ; attempt++ {
					if len(batch) == 1 {
						var r sqlonce.Result
						r, err = in.Handle(ctx, batch[0], func(ctx context.Context, tx TTx) error {
							return db.Tx(tx).LedgerInsert(ctx, batch[0], 1)
						})
						res = []sqlonce.Result{r}
					} else {
						res, err = in.HandleBatch(ctx, batch, func(ctx context.Context, tx TTx, fresh []string) error {
							for _, id := range fresh {
								if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
									return err
								}
							}
							return nil
						})
					}
					if err == nil || !sqlonce.IsRetryable(err) || attempt > 100 {
						break
					}
					time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
				}
				if err != nil {
					return err
				}
				for j, r := range res {
					if r.FirstRun() {
						var n int
						fmt.Sscanf(batch[j], "id-%d", &n)
						first[n].Add(1)
					}
				}
			}
			return nil
		})
		noErrors(t, errs)
		per, err := db.Pool().LedgerCountPerRef(ctx)
		must(t, err)
		for n := range ids {
			id := fmt.Sprintf("id-%02d", n)
			if per[id] > 1 || per[id] != first[n].Load() {
				t.Errorf("%s: applied %d times, reported FirstRun %d times", id, per[id], first[n].Load())
			}
		}
	})
}

// wantOutcomes fails t unless res has the outcomes spelled by want, one
// letter per result: F FirstRun, D AlreadyDone.
func wantOutcomes(t testing.TB, what string, res []sqlonce.Result, want string) {
	t.Helper()
	got := make([]byte, len(res))
	for i, r := range res {
		switch {
		case r.FirstRun():
			got[i] = 'F'
		case r.AlreadyDone():
			got[i] = 'D'
		default:
			got[i] = '?'
		}
	}
	if string(got) != want {
		t.Fatalf("%s: outcomes %s, want %s", what, got, want)
	}
}

// batchOnce runs s.DoBatch on ids in a transaction of its own, with an fn
// that must not run.
func batchOnce[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], ids ...string) []sqlonce.Result {
	t.Helper()
	var res []sqlonce.Result
	must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		var err error
		res, err = s.DoBatch(ctx, tx, "sc", ids, func(context.Context, []string) error { return errors.New("ran") })
		return err
	}))
	return res
}
