package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// wantNilHandleRefused fails t unless New of d's kind refuses a nil
// database handle (and, where the handle is an interface, a typed nil
// pointer) with an error matching sqlonce.ErrInvalidArgument.
func wantNilHandleRefused[TTx any](t testing.TB, d sqlonce.Driver[TTx]) {
	t.Helper()
	var errs map[string]error
	switch any(d).(type) {
	case *pgxdriver.Driver:
		_, errNil := pgxdriver.New(nil)
		_, errTyped := pgxdriver.New((*pgxpool.Pool)(nil))
		errs = map[string]error{"nil": errNil, "nil *pgxpool.Pool": errTyped}
	case *pgsqldriver.Driver:
		_, err := pgsqldriver.New(nil)
		errs = map[string]error{"nil": err}
	case *mysqldriver.Driver:
		_, err := mysqldriver.New(nil)
		errs = map[string]error{"nil": err}
	case *sqlitedriver.Driver:
		_, err := sqlitedriver.New(nil)
		errs = map[string]error{"nil": err}
	default:
		t.Fatalf("unknown driver %T", d)
	}
	for name, err := range errs {
		wantErr(t, "New("+name+")", err, sqlonce.ErrInvalidArgument)
	}
}

// wantLease fails t unless a claim won with a lease for req.
func wantLease(t testing.TB, what string, req dedupe.Request, l *dedupe.Lease, res sqlonce.Result, err error) *dedupe.Lease {
	t.Helper()
	wantOutcome(t, what, res, err, sqlonce.FirstRun, nil)
	if l == nil || l.Scope != req.Scope || l.Key != req.Key || l.Token <= 0 {
		t.Fatalf("%s: lease %+v for %s/%s", what, l, req.Scope, req.Key)
	}
	return l
}

// wantErr fails t unless err matches target.
func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want %v", what, err, target)
	}
}

func sameRow(t testing.TB, what string, got, want harness.KeyRow) {
	t.Helper()
	if got.State != want.State || got.Token != want.Token || !bytes.Equal(got.Response, want.Response) || !bytes.Equal(got.Fingerprint, want.Fingerprint) {
		t.Fatalf("%s: row changed from %+v to %+v", what, want, got)
	}
}

func runDedupeLease[TTx any](t *testing.T, f harness.Factory[TTx]) {
	newStore := func(t *testing.T, db harness.DB[TTx], opts ...dedupe.Option) *dedupe.Store[TTx] {
		s, err := dedupe.New(db.Driver(), opts...)
		must(t, err)
		return s
	}

	t.Run("ClaimCompleteReplay", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "pay-1", Fingerprint: []byte("fp")}

		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.State != 2 || row.Token != l.Token || row.Response != nil {
			t.Fatalf("leased row %+v, want state 2 with the lease's token %d", row, l.Token)
		}

		// While the lease holds, every duplicate is in progress.
		l2, _, err := s.Claim(at(ctx, t0, 30*time.Second), req, time.Minute)
		wantErr(t, "claim during the lease", err, sqlonce.ErrInProgress)
		if l2 != nil {
			t.Fatal("a lease returned with ErrInProgress")
		}
		other := req
		other.Fingerprint = []byte("other")
		_, _, err = s.Claim(at(ctx, t0, 30*time.Second), other, time.Minute)
		wantErr(t, "claim with another fingerprint during the lease", err, sqlonce.ErrInProgress)
		_, err = doRecord(at(ctx, t0, 30*time.Second), db, s, req, "never")
		wantErr(t, "Do during the lease", err, sqlonce.ErrInProgress)

		must(t, s.Complete(at(ctx, t0, 40*time.Second), l, []byte("receipt-1")))
		done := keyRow(t, ctx, db, req.Scope, req.Key)
		if done.State != 1 || done.Token != l.Token || string(done.Response) != "receipt-1" {
			t.Fatalf("completed row %+v", done)
		}

		// Completed: repeats replay the response, in lease mode and in a
		// transaction alike; another request under the key is refused.
		l2, res, err = s.Claim(at(ctx, t0, 50*time.Second), req, time.Minute)
		wantOutcome(t, "claim after completion", res, err, sqlonce.AlreadyDone, ptr("receipt-1"))
		if l2 != nil {
			t.Fatal("a lease returned with AlreadyDone")
		}
		res, err = doRecord(at(ctx, t0, 50*time.Second), db, s, req, "never")
		wantOutcome(t, "Do after completion", res, err, sqlonce.AlreadyDone, ptr("receipt-1"))
		_, _, err = s.Claim(at(ctx, t0, 50*time.Second), other, time.Minute)
		wantErr(t, "claim with another fingerprint after completion", err, sqlonce.ErrKeyReuse)

		// The lease is spent: nothing more it can do.
		later := at(ctx, t0, 55*time.Second)
		wantErr(t, "second Complete", s.Complete(later, l, []byte("receipt-2")), sqlonce.ErrLeaseLost)
		wantErr(t, "Release after Complete", s.Release(later, l), sqlonce.ErrLeaseLost)
		wantErr(t, "Extend after Complete", s.Extend(later, l, time.Hour), sqlonce.ErrLeaseLost)
		sameRow(t, "after the spent lease's calls", keyRow(t, ctx, db, req.Scope, req.Key), done)
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows: %d, want 0 (no Do ran the work)", n)
		}
	})

	// Complete records a response as large as MaxResponseSize on every
	// server default (MariaDB's max_allowed_packet is 16 MiB).
	t.Run("CompleteLargestResponse", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db, dedupe.WithMaxResponseSize(dedupe.MaxResponseSize))
		body := bytes.Repeat([]byte{0, 0xff, 'x', ' '}, dedupe.MaxResponseSize/4+1)[:dedupe.MaxResponseSize]
		req := dedupe.Request{Scope: "lease", Key: "16m"}
		l, res, err := s.Claim(ctx, req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		must(t, s.Complete(ctx, l, body))
		_, res, err = s.Claim(ctx, req, time.Minute)
		must(t, err)
		if !res.AlreadyDone() || !bytes.Equal(res.Response, body) {
			t.Fatalf("replay after Complete: %v with %d bytes, want already done with %d", res, len(res.Response), len(body))
		}
	})

	t.Run("ReleaseThenReclaim", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "mail-1"}
		l1, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l1, res, err)

		now := at(ctx, t0, time.Second)
		must(t, s.Release(now, l1))
		released := keyRow(t, ctx, db, req.Scope, req.Key)
		wantErr(t, "second Release", s.Release(now, l1), sqlonce.ErrLeaseLost)
		wantErr(t, "Complete after Release", s.Complete(now, l1, []byte("late")), sqlonce.ErrLeaseLost)
		wantErr(t, "Extend after Release", s.Extend(now, l1, time.Hour), sqlonce.ErrLeaseLost)
		sameRow(t, "after the released lease's calls", keyRow(t, ctx, db, req.Scope, req.Key), released)

		// At the very instant of the release the key is free again.
		l2, res, err := s.Claim(now, req, time.Minute)
		wantLease(t, "claim after Release", req, l2, res, err)
		if l2.Token <= l1.Token {
			t.Fatalf("token after release %d, not above %d", l2.Token, l1.Token)
		}
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.Token != l2.Token || row.State != 2 {
			t.Fatalf("row %+v, want the new lease's token %d", row, l2.Token)
		}
		must(t, s.Complete(now, l2, []byte("sent")))
		_, res, err = s.Claim(now, req, time.Minute)
		wantOutcome(t, "claim after completion", res, err, sqlonce.AlreadyDone, ptr("sent"))
	})

	t.Run("LapsedLeaseTakenOver", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "charge-1"}
		l1, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l1, res, err)

		_, _, err = s.Claim(at(ctx, t0, time.Minute-time.Microsecond), req, time.Minute)
		wantErr(t, "claim 1µs before the deadline", err, sqlonce.ErrInProgress)
		l2, res, err := s.Claim(at(ctx, t0, time.Minute), req, time.Minute)
		wantLease(t, "claim at the deadline", req, l2, res, err)
		if l2.Token <= l1.Token {
			t.Fatalf("takeover token %d, not above %d", l2.Token, l1.Token)
		}
		taken := keyRow(t, ctx, db, req.Scope, req.Key)
		if taken.Token != l2.Token || taken.State != 2 {
			t.Fatalf("row %+v, want the takeover's token %d", taken, l2.Token)
		}

		// The old holder comes back: fenced off, nothing changes.
		now := at(ctx, t0, time.Minute+time.Second)
		wantErr(t, "stale Complete", s.Complete(now, l1, []byte("stale")), sqlonce.ErrLeaseLost)
		wantErr(t, "stale Release", s.Release(now, l1), sqlonce.ErrLeaseLost)
		wantErr(t, "stale Extend", s.Extend(now, l1, time.Hour), sqlonce.ErrLeaseLost)
		sameRow(t, "after the stale holder's calls", keyRow(t, ctx, db, req.Scope, req.Key), taken)
		_, _, err = s.Claim(now, req, time.Minute)
		wantErr(t, "claim while the new lease holds", err, sqlonce.ErrInProgress)

		must(t, s.Complete(now, l2, []byte("fresh")))
		_, res, err = s.Claim(now, req, time.Minute)
		wantOutcome(t, "claim after completion", res, err, sqlonce.AlreadyDone, ptr("fresh"))
	})

	t.Run("LapsedLeaseNobodyTookOver", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db, dedupe.WithTTL(time.Hour))
		t0 := clockBase()

		// Completed late: the token is still the current one.
		done := dedupe.Request{Scope: "lease", Key: "late-complete"}
		l, res, err := s.Claim(at(ctx, t0, 0), done, time.Minute)
		wantLease(t, "claim", done, l, res, err)
		must(t, s.Complete(at(ctx, t0, 10*time.Minute), l, []byte("late")))
		_, res, err = s.Claim(at(ctx, t0, 10*time.Minute), done, time.Minute)
		wantOutcome(t, "claim after the late completion", res, err, sqlonce.AlreadyDone, ptr("late"))

		// Extended late: the lease holds again.
		ext := dedupe.Request{Scope: "lease", Key: "late-extend"}
		l, res, err = s.Claim(at(ctx, t0, 0), ext, time.Minute)
		wantLease(t, "claim", ext, l, res, err)
		must(t, s.Extend(at(ctx, t0, 5*time.Minute), l, time.Minute))
		_, _, err = s.Claim(at(ctx, t0, 6*time.Minute-time.Microsecond), ext, time.Minute)
		wantErr(t, "claim before the extended deadline", err, sqlonce.ErrInProgress)
		l2, res, err := s.Claim(at(ctx, t0, 6*time.Minute), ext, time.Minute)
		wantLease(t, "claim at the extended deadline", ext, l2, res, err)

		// Purged once expired: nothing left to complete.
		gone := dedupe.Request{Scope: "lease", Key: "purged", TTL: time.Minute}
		l, res, err = s.Claim(at(ctx, t0, 0), gone, time.Minute)
		wantLease(t, "claim", gone, l, res, err)
		n, err := s.Purge(at(ctx, t0, 30*time.Minute), 0)
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d keys, want the 1 expired lapsed lease", n)
		}
		wantErr(t, "Complete after purge", s.Complete(at(ctx, t0, 30*time.Minute), l, []byte("x")), sqlonce.ErrLeaseLost)
		if _, ok, err := db.Key(ctx, gone.Scope, gone.Key); err != nil || ok {
			t.Fatalf("Complete after purge recreated the key (%v)", err)
		}
	})

	t.Run("ExtendMovesDeadline", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		// The key's TTL is shorter than where Extend moves the deadline:
		// the key's expiry must follow, or purge would delete a held lease
		// (and the table's CHECK would refuse the UPDATE).
		req := dedupe.Request{Scope: "lease", Key: "export-1", TTL: 2 * time.Minute}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		// To the deadline it already has: held, although no column changes.
		must(t, s.Extend(at(ctx, t0, 0), l, time.Minute))
		must(t, s.Extend(at(ctx, t0, 50*time.Second), l, 10*time.Minute))
		deadline := 10*time.Minute + 50*time.Second

		_, _, err = s.Claim(at(ctx, t0, 5*time.Minute), req, time.Minute)
		wantErr(t, "claim past the first deadline", err, sqlonce.ErrInProgress)
		n, err := s.Purge(at(ctx, t0, deadline-time.Microsecond), 0)
		must(t, err)
		if n != 0 {
			t.Fatalf("purge removed %d keys while the extended lease held", n)
		}
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.Token != l.Token || row.State != 2 {
			t.Fatalf("row %+v after purge", row)
		}
		_, _, err = s.Claim(at(ctx, t0, deadline-time.Microsecond), req, time.Minute)
		wantErr(t, "claim 1µs before the extended deadline", err, sqlonce.ErrInProgress)
		l2, res, err := s.Claim(at(ctx, t0, deadline), req, time.Minute)
		wantLease(t, "claim at the extended deadline", req, l2, res, err)
		wantErr(t, "Extend by the replaced holder", s.Extend(at(ctx, t0, deadline), l, time.Hour), sqlonce.ErrLeaseLost)
	})

	t.Run("CompleteTxWithBusinessWrite", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		req := dedupe.Request{Scope: "lease", Key: "refund-1"}
		l, res, err := s.Claim(ctx, req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		leased := keyRow(t, ctx, db, req.Scope, req.Key)

		complete := func(tx TTx) error {
			if err := db.Tx(tx).LedgerInsert(ctx, req.Key, -100); err != nil {
				return err
			}
			return s.CompleteTx(ctx, tx, l, []byte("refunded"))
		}
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			if err := complete(tx); err != nil {
				return err
			}
			return errRollback
		})
		wantErr(t, "rolled back completion", err, errRollback)
		sameRow(t, "after a rolled back completion", keyRow(t, ctx, db, req.Scope, req.Key), leased)
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows after rollback: %d", n)
		}

		must(t, harness.WithTx(ctx, db, harness.Default, complete))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		_, res, err = s.Claim(ctx, req, time.Minute)
		wantOutcome(t, "claim after completion", res, err, sqlonce.AlreadyDone, ptr("refunded"))
	})

	t.Run("ClaimTxCommitsWithTx", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		req := dedupe.Request{Scope: "lease", Key: "in-tx"}
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			l, res, err := s.ClaimTx(ctx, tx, req, time.Minute)
			wantLease(t, "ClaimTx", req, l, res, err)
			return errRollback
		})
		wantErr(t, "rolled back ClaimTx", err, errRollback)
		if n := keyCount(t, ctx, db); n != 0 {
			t.Fatalf("%d keys after a rolled back ClaimTx", n)
		}
		var l *dedupe.Lease
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			l, _, err = s.ClaimTx(ctx, tx, req, time.Minute)
			return err
		}))
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.State != 2 || row.Token != l.Token {
			t.Fatalf("row %+v after ClaimTx, want the lease's token %d", row, l.Token)
		}
	})

	t.Run("DeadWorkerTakenOver", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "job-1"}
		work := func(ctx context.Context, l *dedupe.Lease) error {
			return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
					return err
				}
				return s.CompleteTx(ctx, tx, l, fmt.Appendf(nil, "done by %d", l.Token))
			})
		}
		died := make(chan error, 1)
		go func() {
			_, _, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
			died <- err // and never completes
		}()
		must(t, <-died)

		_, _, err := s.Claim(at(ctx, t0, 30*time.Second), req, time.Minute)
		wantErr(t, "claim while the dead worker's lease holds", err, sqlonce.ErrInProgress)
		l, res, err := s.Claim(at(ctx, t0, time.Minute), req, time.Minute)
		wantLease(t, "claim after the deadline", req, l, res, err)
		must(t, work(at(ctx, t0, time.Minute), l))
		_, res, err = s.Claim(at(ctx, t0, 2*time.Minute), req, time.Minute)
		wantOutcome(t, "claim after the work", res, err, sqlonce.AlreadyDone, ptr(fmt.Sprintf("done by %d", l.Token)))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
	})

	t.Run("DoTakesOverLapsedLease", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "mixed"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		res, err = doRecord(at(ctx, t0, time.Minute), db, s, req, "in tx")
		wantOutcome(t, "Do after the deadline", res, err, sqlonce.FirstRun, ptr("in tx"))
		row := keyRow(t, ctx, db, req.Scope, req.Key)
		if row.State != 1 || row.Token <= l.Token {
			t.Fatalf("row %+v after Do took over token %d", row, l.Token)
		}
		wantErr(t, "Complete by the replaced holder", s.Complete(at(ctx, t0, time.Minute), l, []byte("x")), sqlonce.ErrLeaseLost)
		_, res, err = s.Claim(at(ctx, t0, time.Minute), req, time.Minute)
		wantOutcome(t, "claim after Do", res, err, sqlonce.AlreadyDone, ptr("in tx"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
	})

	// A context that ends leaves a lease where it is: neither Claim,
	// Complete nor Release gives it up on the caller's behalf. A Complete
	// or Release that ctx cut leaves the lease held until its deadline, and
	// the holder may Complete or Release it with another context. Run holds
	// no lease: a ctx that ends inside fn rolls fn's transaction back, and
	// the key is as it was (here: a lapsed lease, taken over at once).
	t.Run("CancelledContext", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db)
		t0 := clockBase()
		cancelled, cancel := context.WithCancel(at(ctx, t0, 0))
		cancel()

		req := dedupe.Request{Scope: "lease", Key: "cut"}
		_, _, err := s.Claim(cancelled, req, time.Minute)
		wantErr(t, "Claim with a cancelled context", err, context.Canceled)
		if _, ok, err := db.Key(ctx, req.Scope, req.Key); err != nil || ok {
			t.Fatalf("a cancelled Claim left a key (%v)", err)
		}

		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		held := keyRow(t, ctx, db, req.Scope, req.Key)
		wantErr(t, "Complete with a cancelled context", s.Complete(cancelled, l, []byte("x")), context.Canceled)
		wantErr(t, "Release with a cancelled context", s.Release(cancelled, l), context.Canceled)
		sameRow(t, "after the cancelled calls", keyRow(t, ctx, db, req.Scope, req.Key), held)
		_, _, err = s.Claim(at(ctx, t0, time.Minute-time.Microsecond), req, time.Minute)
		wantErr(t, "claim before the deadline", err, sqlonce.ErrInProgress)
		must(t, s.Complete(context.WithoutCancel(at(ctx, t0, time.Second)), l, []byte("done")))
		_, res, err = s.Claim(at(ctx, t0, 2*time.Second), req, time.Minute)
		wantOutcome(t, "claim after the completion", res, err, sqlonce.AlreadyDone, ptr("done"))

		// Run over a lapsed lease, its ctx cancelled inside fn.
		lapsed := dedupe.Request{Scope: "lease", Key: "run-cut"}
		l, res, err = s.Claim(at(ctx, t0, 0), lapsed, time.Minute)
		wantLease(t, "claim", lapsed, l, res, err)
		before := keyRow(t, ctx, db, lapsed.Scope, lapsed.Key)
		runCtx, stop := context.WithCancel(at(ctx, t0, 2*time.Minute))
		_, err = s.Run(runCtx, lapsed, func(ctx context.Context, tx TTx) ([]byte, error) {
			if err := db.Tx(tx).LedgerInsert(ctx, lapsed.Key, 1); err != nil {
				return nil, err
			}
			stop()
			return nil, ctx.Err()
		})
		stop()
		wantErr(t, "Run cancelled inside fn", err, context.Canceled)
		sameRow(t, "after the cancelled Run", keyRow(t, ctx, db, lapsed.Scope, lapsed.Key), before)
		if n := ledgerRows(t, ctx, db, lapsed.Key); n != 0 {
			t.Fatalf("ledger rows after the cancelled Run: %d, want 0", n)
		}
		l2, res, err := s.Claim(at(ctx, t0, 2*time.Minute), lapsed, time.Minute)
		wantLease(t, "claim after the cancelled Run", lapsed, l2, res, err)
	})

	t.Run("TokenGrowsAcrossPurge", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db, dedupe.WithTTL(time.Minute))
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease", Key: "reborn"}
		l1, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l1, res, err)
		must(t, s.Complete(at(ctx, t0, time.Second), l1, nil))
		_, res, err = s.Claim(at(ctx, t0, time.Second), req, time.Minute)
		wantOutcome(t, "claim after Complete(nil)", res, err, sqlonce.AlreadyDone, ptr(""))
		if res.Response == nil {
			t.Fatal("Complete(nil) replays a nil response, want it recorded as empty")
		}
		n, err := s.Purge(at(ctx, t0, time.Hour), 0)
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
		l2, res, err := s.Claim(at(ctx, t0, time.Hour), req, time.Minute)
		wantLease(t, "claim after purge", req, l2, res, err)
		if l2.Token <= l1.Token {
			t.Fatalf("token after purge %d, not above %d", l2.Token, l1.Token)
		}
	})

	t.Run("TokenGrowsAcrossPurgeInLongTx", func(t *testing.T) {
		// Real clock: a transaction that began before a key's last claim
		// claims it afresh after it was purged. Its token must still be
		// larger, although the transaction is older than that claim.
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteTwoWriters)
		s := newStore(t, db, dedupe.WithTTL(time.Minute))
		req := dedupe.Request{Scope: "lease", Key: "old-tx"}
		long, err := db.Begin(ctx, harness.Default)
		must(t, err)
		defer func() { _ = db.Rollback(context.Background(), long) }()
		_, err = db.Tx(long).LedgerCountByRef(ctx, req.Key)
		must(t, err)
		time.Sleep(2 * time.Millisecond) // let the clock move past the transaction's start

		l1, res, err := s.Claim(ctx, req, time.Minute)
		wantLease(t, "claim", req, l1, res, err)
		must(t, s.Complete(ctx, l1, nil))
		n, err := s.Purge(at(ctx, time.Now(), time.Hour), 0)
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
		l2, res, err := s.ClaimTx(ctx, long, req, time.Minute)
		wantLease(t, "claim in the older transaction", req, l2, res, err)
		must(t, db.Commit(ctx, long))
		if l2.Token <= l1.Token {
			t.Fatalf("token after purge %d, not above the purged key's %d", l2.Token, l1.Token)
		}
	})

	t.Run("RaceClaimFresh", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		s := newStore(t, db)
		req := dedupe.Request{Scope: "lease-race", Key: "fresh"}
		raceClaim(t, ctx, db, s, req, nil)
	})

	t.Run("RaceClaimLapsed", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease-race", Key: "lapsed"}
		l0, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l0, res, err)
		raceClaim(t, at(ctx, t0, 2*time.Minute), db, s, req, l0)
	})

	t.Run("RaceComplete", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		s := newStore(t, db)
		t0 := clockBase()
		req := dedupe.Request{Scope: "lease-race", Key: "complete"}
		var leases []*dedupe.Lease
		for i := range 3 { // two stale holders, then the current one
			l, res, err := s.Claim(at(ctx, t0, time.Duration(i)*time.Minute), req, time.Minute)
			leases = append(leases, wantLease(t, "claim", req, l, res, err))
		}
		current := leases[2]
		now := at(ctx, t0, 2*time.Minute+30*time.Second)
		var completed atomic.Int64
		errs := race(Racers, func(i int) error {
			l := leases[i%len(leases)]
			var err error
			switch {
			case l != current && i%2 == 0:
				err = s.Release(now, l)
			case l != current && i%4 == 1:
				err = s.Extend(now, l, time.Hour)
			default:
				err = s.Complete(now, l, fmt.Appendf(nil, "by %d", l.Token))
			}
			if err == nil {
				if l != current {
					return fmt.Errorf("stale token %d succeeded", l.Token)
				}
				completed.Add(1)
				return nil
			}
			if errors.Is(err, sqlonce.ErrLeaseLost) {
				return nil
			}
			return err
		})
		noErrors(t, errs)
		if completed.Load() != 1 {
			t.Fatalf("%d completions landed, want 1", completed.Load())
		}
		row := keyRow(t, ctx, db, req.Scope, req.Key)
		if row.State != 1 || row.Token != current.Token || string(row.Response) != fmt.Sprintf("by %d", current.Token) {
			t.Fatalf("row %+v, want completed by token %d", row, current.Token)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s := newStore(t, db, dedupe.WithMaxResponseSize(8))
		req := dedupe.Request{Scope: "lease", Key: "bad"}
		for _, d := range []time.Duration{0, -time.Second, 500 * time.Nanosecond} {
			l, _, err := s.Claim(ctx, req, d)
			wantErr(t, fmt.Sprintf("Claim for %v", d), err, sqlonce.ErrInvalidArgument)
			if l != nil {
				t.Fatal("a lease returned with an error")
			}
		}
		_, _, err := s.Claim(ctx, dedupe.Request{Scope: "lease", Key: ""}, time.Minute)
		wantErr(t, "Claim with an empty key", err, sqlonce.ErrInvalidKey)
		_, _, err = s.Claim(ctx, dedupe.Request{Scope: "lease", Key: "k", TTL: -time.Second}, time.Minute)
		wantErr(t, "Claim with a negative TTL", err, sqlonce.ErrInvalidArgument)
		if n := keyCount(t, ctx, db); n != 0 {
			t.Fatalf("%d keys after refused claims", n)
		}

		l, res, err := s.Claim(ctx, req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		leased := keyRow(t, ctx, db, req.Scope, req.Key)
		wantErr(t, "Complete(nil)", s.Complete(ctx, nil, nil), sqlonce.ErrInvalidArgument)
		wantErr(t, "Release(nil)", s.Release(ctx, nil), sqlonce.ErrInvalidArgument)
		wantErr(t, "Extend(nil)", s.Extend(ctx, nil, time.Minute), sqlonce.ErrInvalidArgument)
		for _, d := range []time.Duration{0, -time.Second, 500 * time.Nanosecond} {
			wantErr(t, fmt.Sprintf("Extend by %v", d), s.Extend(ctx, l, d), sqlonce.ErrInvalidArgument)
		}
		wantErr(t, "Complete over the size limit", s.Complete(ctx, l, []byte("123456789")), sqlonce.ErrResponseTooLarge)
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			return s.CompleteTx(ctx, tx, l, []byte("123456789"))
		})
		wantErr(t, "CompleteTx over the size limit", err, sqlonce.ErrResponseTooLarge)
		sameRow(t, "after refused calls", keyRow(t, ctx, db, req.Scope, req.Key), leased)

		must(t, s.Complete(ctx, l, []byte("12345678")))
		_, res, err = s.Claim(ctx, req, time.Minute)
		wantOutcome(t, "claim after completion at the limit", res, err, sqlonce.AlreadyDone, ptr("12345678"))
	})

	t.Run("NilHandle", func(t *testing.T) {
		wantNilHandleRefused(t, f(t, 0).Driver())
	})
}

// raceClaim has Racers goroutines claim req at once, each running the work
// (a ledger row) and completing if it gets the lease, and checks that
// exactly one did, with a token above prev's.
func raceClaim[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, prev *dedupe.Lease) {
	t.Helper()
	var (
		winners atomic.Int64
		won     atomic.Pointer[dedupe.Lease]
	)
	errs := race(Racers, func(i int) error {
		l, res, err := s.Claim(ctx, req, time.Minute)
		if errors.Is(err, sqlonce.ErrInProgress) {
			return nil
		}
		if err != nil {
			return err
		}
		if !res.FirstRun() || l == nil {
			return fmt.Errorf("outcome %v, lease %v", res.Outcome, l)
		}
		winners.Add(1)
		won.Store(l)
		return nil
	})
	noErrors(t, errs)
	if winners.Load() != 1 {
		t.Fatalf("%d racers got the lease, want 1", winners.Load())
	}
	l := won.Load()
	if prev != nil && l.Token <= prev.Token {
		t.Fatalf("winner's token %d, not above %d", l.Token, prev.Token)
	}
	must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
			return err
		}
		return s.CompleteTx(ctx, tx, l, []byte("winner"))
	}))
	if row := keyRow(t, ctx, db, req.Scope, req.Key); row.Token != l.Token || row.State != 1 {
		t.Fatalf("row %+v, want completed with the winner's token %d", row, l.Token)
	}
	if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
		t.Fatalf("ledger rows: %d, want 1", n)
	}
}
