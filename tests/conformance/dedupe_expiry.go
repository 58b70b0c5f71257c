package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// clockBase is the "now" time-based cases start from: near the real clock,
// so that tokens derived from it compare sensibly with real ones, and
// millisecond-aligned, so that both databases store it exactly.
func clockBase() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// at pins the database's "now" for sqlonce queries run with the returned
// context to base+d.
func at(ctx context.Context, base time.Time, d time.Duration) context.Context {
	return testclock.With(ctx, base.Add(d))
}

// doRecord runs DoResponse for req in a transaction of its own; the work
// writes one ledger row with ref req.Key and answers resp.
func doRecord[TTx any](ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, resp string) (sqlonce.Result, error) {
	var res sqlonce.Result
	err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		var err error
		res, err = s.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
			return []byte(resp), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
		})
		return err
	})
	return res, err
}

// wantOutcome fails t unless err is nil and res has the outcome and, when
// resp is not nil, that response.
func wantOutcome(t testing.TB, what string, res sqlonce.Result, err error, want sqlonce.Outcome, resp *string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.Outcome != want {
		t.Fatalf("%s: outcome %v, want %v", what, res.Outcome, want)
	}
	if resp != nil && string(res.Response) != *resp {
		t.Fatalf("%s: response %q, want %q", what, res.Response, *resp)
	}
}

func ptr[T any](v T) *T { return &v }

func ledgerRows[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], ref string) int64 {
	t.Helper()
	n, err := db.Pool().LedgerCountByRef(ctx, ref)
	must(t, err)
	return n
}

func keyCount[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx]) int64 {
	t.Helper()
	n, err := db.KeyCount(ctx)
	must(t, err)
	return n
}

// keyRow reads a key's row and fails t when there is none. Its Leased and
// Expired flags follow the real clock, not a pinned one: cases that pin
// "now" judge State, Token and Response only.
func keyRow[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], scope, key string) harness.KeyRow {
	t.Helper()
	row, ok, err := db.Key(ctx, scope, key)
	must(t, err)
	if !ok {
		t.Fatalf("key %s/%s: no row", scope, key)
	}
	return row
}

// seedKeys records n keys named prefix-i in scope, each with ttl (0: the
// Store's), as of the pinned ctx, 250 keys to a transaction with DoBatch:
// thousands of Do calls took minutes with every configuration running at
// once, and the cases using it are about purging, not claiming.
func seedKeys[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], scope, prefix string, n int, ttl time.Duration) {
	t.Helper()
	if ttl != 0 {
		var err error
		s, err = dedupe.New(db.Driver(), dedupe.WithTTL(ttl))
		must(t, err)
	}
	for lo := 0; lo < n; lo += 250 {
		ids := make([]string, 0, 250)
		for i := lo; i < min(lo+250, n); i++ {
			ids = append(ids, fmt.Sprintf("%s-%d", prefix, i))
		}
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			results, err := s.DoBatch(ctx, tx, scope, ids, func(context.Context, []string) error { return nil })
			if err != nil {
				return err
			}
			for i, res := range results {
				if !res.FirstRun() {
					return fmt.Errorf("seed %s: %v", ids[i], res.Outcome)
				}
			}
			return nil
		}))
	}
}

func runDedupeExpiry[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("ExpiredKeyCountsAsAbsent", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Hour))
		must(t, err)
		t0 := clockBase()
		req := dedupe.Request{Scope: "expiry", Key: "k", Fingerprint: []byte("v1")}

		res, err := doRecord(at(ctx, t0, 0), db, s, req, "first")
		wantOutcome(t, "record", res, err, sqlonce.FirstRun, ptr("first"))
		before := keyRow(t, ctx, db, req.Scope, req.Key)

		res, err = doRecord(at(ctx, t0, time.Hour-time.Microsecond), db, s, req, "never")
		wantOutcome(t, "1µs before expiry", res, err, sqlonce.AlreadyDone, ptr("first"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows before expiry: %d, want 1", n)
		}

		// At expires_at the key is absent: taken over with a new request,
		// fingerprint and response, as if it had never been recorded.
		req2 := req
		req2.Fingerprint = []byte("v2")
		res, err = doRecord(at(ctx, t0, time.Hour), db, s, req2, "second")
		wantOutcome(t, "at expiry", res, err, sqlonce.FirstRun, ptr("second"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
			t.Fatalf("ledger rows after takeover: %d, want 2", n)
		}
		after := keyRow(t, ctx, db, req.Scope, req.Key)
		if after.Token <= before.Token {
			t.Errorf("token after takeover %d, not above %d", after.Token, before.Token)
		}
		if string(after.Fingerprint) != "v2" || string(after.Response) != "second" {
			t.Errorf("row after takeover: fingerprint %q response %q", after.Fingerprint, after.Response)
		}

		// The takeover recorded the key afresh: live for another hour, and
		// the old request is now a different one.
		res, err = doRecord(at(ctx, t0, 2*time.Hour-time.Microsecond), db, s, req2, "never")
		wantOutcome(t, "repeat after takeover", res, err, sqlonce.AlreadyDone, ptr("second"))
		_, err = doRecord(at(ctx, t0, 90*time.Minute), db, s, req, "never")
		if !errors.Is(err, sqlonce.ErrKeyReuse) {
			t.Fatalf("old fingerprint after takeover: %v, want ErrKeyReuse", err)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
			t.Fatalf("ledger rows at the end: %d, want 2", n)
		}
	})

	t.Run("RequestTTLOverridesStore", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Hour))
		must(t, err)
		t0 := clockBase()
		short := dedupe.Request{Scope: "ttl", Key: "short", TTL: 10 * time.Minute}
		long := dedupe.Request{Scope: "ttl", Key: "long", TTL: 3 * time.Hour}
		plain := dedupe.Request{Scope: "ttl", Key: "plain"}
		for _, req := range []dedupe.Request{short, long, plain} {
			res, err := doRecord(at(ctx, t0, 0), db, s, req, req.Key)
			wantOutcome(t, "record "+req.Key, res, err, sqlonce.FirstRun, nil)
		}
		for _, c := range []struct {
			req  dedupe.Request
			when time.Duration
			want sqlonce.Outcome
		}{
			{short, 10*time.Minute - time.Microsecond, sqlonce.AlreadyDone},
			{plain, 10 * time.Minute, sqlonce.AlreadyDone},
			{short, 10 * time.Minute, sqlonce.FirstRun},
			{plain, time.Hour - time.Microsecond, sqlonce.AlreadyDone},
			{long, 2 * time.Hour, sqlonce.AlreadyDone},
			{plain, time.Hour, sqlonce.FirstRun},
			{long, 3*time.Hour - time.Microsecond, sqlonce.AlreadyDone},
			{long, 3 * time.Hour, sqlonce.FirstRun},
		} {
			res, err := doRecord(at(ctx, t0, c.when), db, s, c.req, c.req.Key)
			wantOutcome(t, fmt.Sprintf("%s at +%v", c.req.Key, c.when), res, err, c.want, nil)
		}
		per, err := db.Pool().LedgerCountPerRef(ctx)
		must(t, err)
		for _, k := range []string{"short", "long", "plain"} {
			if per[k] != 2 {
				t.Errorf("%s: %d ledger rows, want 2", k, per[k])
			}
		}
	})

	t.Run("RaceExpiredKey", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, Racers+4)
				s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
				must(t, err)
				t0 := clockBase()
				req := dedupe.Request{Scope: "race-expiry", Key: "k"}
				res, err := doRecord(at(ctx, t0, 0), db, s, req, "old")
				wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
				old := keyRow(t, ctx, db, req.Scope, req.Key)

				late := at(ctx, t0, time.Hour)
				var (
					c       counter
					retries atomic.Int64
				)
				errs := race(Racers, func(i int) error {
					var res sqlonce.Result
					n, err := retryTx(late, db, iso, func(tx TTx) error {
						var err error
						res, err = s.DoResponse(late, tx, req, func(ctx context.Context) ([]byte, error) {
							return fmt.Appendf(nil, "racer-%d", i), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
						})
						return err
					})
					if err == nil {
						c.add(res) // the attempt that committed
					}
					retries.Add(int64(n))
					return err
				})
				noErrors(t, errs)
				if c.first.Load() != 1 || c.done.Load() != int64(Racers)-1 {
					t.Errorf("outcomes %s, want first=1 done=%d", &c, Racers-1)
				}
				if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
					t.Errorf("ledger rows: %d, want 2 (the first record and one takeover)", n)
				}
				row := keyRow(t, ctx, db, req.Scope, req.Key)
				if row.Token <= old.Token {
					t.Errorf("token %d after takeover, not above %d", row.Token, old.Token)
				}
				t.Logf("%s: %s, %d retries", iso, &c, retries.Load())
			})
		}
	})

	t.Run("PurgeTxLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
		must(t, err)
		t0 := clockBase()
		seedKeys(t, at(ctx, t0, 0), db, s, "purge", "old", 25, 0)
		seedKeys(t, at(ctx, t0, 0), db, s, "purge", "live", 5, 10*time.Hour)
		// A live lease whose key TTL is shorter than the lease: the lease
		// keeps it from expiring. A lapsed lease whose key expired goes.
		held, res, err := s.Claim(at(ctx, t0, 0), dedupe.Request{Scope: "purge", Key: "held"}, 5*time.Hour)
		wantOutcome(t, "claim held", res, err, sqlonce.FirstRun, nil)
		_, res, err = s.Claim(at(ctx, t0, 0), dedupe.Request{Scope: "purge", Key: "lapsed"}, 30*time.Minute)
		wantOutcome(t, "claim lapsed", res, err, sqlonce.FirstRun, nil)
		const expired, live = 26, 6

		now := at(ctx, t0, 2*time.Hour)
		// Rolled back, a purge leaves everything in place.
		err = harness.WithTx(now, db, harness.Default, func(tx TTx) error {
			n, err := s.PurgeTx(now, tx, 10)
			if err == nil && n != 10 {
				err = fmt.Errorf("purged %d, want 10", n)
			}
			if err == nil {
				err = errRollback
			}
			return err
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		if n := keyCount(t, ctx, db); n != expired+live {
			t.Fatalf("%d keys after a rolled back purge, want %d", n, expired+live)
		}

		var got []int64
		for range 4 {
			must(t, harness.WithTx(now, db, harness.Default, func(tx TTx) error {
				n, err := s.PurgeTx(now, tx, 10)
				got = append(got, n)
				return err
			}))
		}
		if fmt.Sprint(got) != "[10 10 6 0]" {
			t.Fatalf("purged per batch %v, want [10 10 6 0]", got)
		}
		if n := keyCount(t, ctx, db); n != live {
			t.Fatalf("%d keys left, want %d", n, live)
		}
		for i := range 5 {
			keyRow(t, ctx, db, "purge", fmt.Sprintf("live-%d", i))
		}
		if row := keyRow(t, ctx, db, "purge", "held"); row.Token != held.Token || row.State != 2 {
			t.Fatalf("held lease after purge: %+v", row)
		}
		_, _, err = s.Claim(now, dedupe.Request{Scope: "purge", Key: "held"}, time.Minute)
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("claim of the held lease after purge: %v, want ErrInProgress", err)
		}
		must(t, s.Complete(now, held, []byte("done")))
	})

	t.Run("PurgeBatches", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
		must(t, err)
		t0 := clockBase()
		seedKeys(t, at(ctx, t0, 0), db, s, "batch", "old", 2500, 0)
		seedKeys(t, at(ctx, t0, 0), db, s, "batch", "live", 100, 10*time.Hour)

		now := at(ctx, t0, 2*time.Hour)
		n, err := s.Purge(now, 1000)
		must(t, err)
		if n != 2500 {
			t.Fatalf("Purge removed %d, want 2500", n)
		}
		n, err = s.Purge(now, 1000)
		must(t, err)
		if n != 0 {
			t.Fatalf("second Purge removed %d, want 0", n)
		}
		if n := keyCount(t, ctx, db); n != 100 {
			t.Fatalf("%d keys left, want the 100 live ones", n)
		}
		// Without a pinned clock the real now sees nothing expired.
		n, err = s.Purge(ctx, 0)
		must(t, err)
		if n != 0 {
			t.Fatalf("Purge at the real now removed %d, want 0", n)
		}
		// Past their expiry the live ones go too, in default-size batches.
		n, err = s.Purge(at(ctx, t0, 11*time.Hour), 0)
		must(t, err)
		if n != 100 || keyCount(t, ctx, db) != 0 {
			t.Fatalf("final Purge removed %d, want 100", n)
		}
	})

	t.Run("PurgeConcurrent", func(t *testing.T) {
		ctx := ctxT(t)
		const purgers = 4
		db := f(t, purgers+4)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
		must(t, err)
		t0 := clockBase()
		seedKeys(t, at(ctx, t0, 0), db, s, "conc", "old", 2500, 0)
		seedKeys(t, at(ctx, t0, 0), db, s, "conc", "live", 100, 10*time.Hour)

		now := at(ctx, t0, 2*time.Hour)
		counts := make([]int64, purgers)
		errs := race(purgers, func(i int) error {
			var err error
			counts[i], err = s.Purge(now, 100)
			return err
		})
		noErrors(t, errs)
		var sum int64
		for _, n := range counts {
			sum += n
		}
		if sum != 2500 {
			t.Fatalf("purgers removed %v = %d keys, want 2500", counts, sum)
		}
		if n := keyCount(t, ctx, db); n != 100 {
			t.Fatalf("%d keys left, want the 100 live ones", n)
		}
		t.Logf("per purger: %v", counts)
	})

	t.Run("PurgeInvalidLimit", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := dedupe.New(db.Driver(), dedupe.WithTTL(time.Minute))
		must(t, err)
		t0 := clockBase()
		seedKeys(t, at(ctx, t0, 0), db, s, "bad", "old", 3, 0)
		now := at(ctx, t0, time.Hour)
		// 0 is the default batch (see ZeroValues).
		for _, limit := range []int{-1, 100001} {
			err := harness.WithTx(now, db, harness.Default, func(tx TTx) error {
				_, err := s.PurgeTx(now, tx, limit)
				return err
			})
			if !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("PurgeTx(%d): %v, want ErrInvalidArgument", limit, err)
			}
		}
		for _, batch := range []int{-1, 100001} {
			if _, err := s.Purge(now, batch); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("Purge(%d): %v, want ErrInvalidArgument", batch, err)
			}
		}
		if n := keyCount(t, ctx, db); n != 3 {
			t.Fatalf("%d keys left, want 3: nothing purged", n)
		}
	})
}

var errRollback = errors.New("roll back")
