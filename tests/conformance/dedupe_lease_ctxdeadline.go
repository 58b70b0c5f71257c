package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runDedupeLeaseCallerDeadline: dedupe.WithinDeadline bounds a lease by
// the caller's deadline plus a margin, as the database records it
// (locked_until), and a retry after the bound takes the key over. The
// database's clock is pinned; the caller's deadline is real, with room
// to spare for a loaded machine: the assertions hold for any time the
// claim takes before the deadline.
func runDedupeLeaseCallerDeadline[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const (
		lease    = 10 * time.Minute // asked for
		deadline = time.Minute      // the caller's, shorter
		margin   = 5 * time.Second
	)
	claimers := map[string]func(s *dedupe.Store[TTx], db harness.DB[TTx], ctx context.Context, req dedupe.Request, opts ...dedupe.ClaimOption) (*dedupe.Lease, sqlonce.Result, error){
		"Claim": func(s *dedupe.Store[TTx], _ harness.DB[TTx], ctx context.Context, req dedupe.Request, opts ...dedupe.ClaimOption) (*dedupe.Lease, sqlonce.Result, error) {
			return s.Claim(ctx, req, lease, opts...)
		},
		"ClaimTx": func(s *dedupe.Store[TTx], db harness.DB[TTx], ctx context.Context, req dedupe.Request, opts ...dedupe.ClaimOption) (l *dedupe.Lease, res sqlonce.Result, err error) {
			err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				l, res, err = s.ClaimTx(ctx, tx, req, lease, opts...)
				return err
			})
			return l, res, err
		},
	}
	for name, claim := range claimers {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			t0 := clockBase()

			// Bounded: the lease ends at the deadline plus the margin.
			req := dedupe.Request{Scope: "deadline", Key: "bounded"}
			dctx, cancel := context.WithTimeout(ctx, deadline)
			l, res, err := claim(s, db, at(dctx, t0, 0), req, dedupe.WithinDeadline(margin))
			cancel()
			wantLease(t, "bounded claim", req, l, res, err)
			until := keyRow(t, ctx, db, req.Scope, req.Key).LockedUntil
			if until.Before(t0.Add(margin)) || until.After(t0.Add(deadline+margin)) {
				t.Fatalf("lease until %v, want within [%v, %v] of the claim", until.Sub(t0), margin, deadline+margin)
			}
			// The holder is gone with its caller: a retry is kept out
			// until the bound, not for the 10 minutes asked for.
			_, _, err = s.Claim(at(ctx, t0, margin-time.Millisecond), req, lease)
			wantErr(t, "retry within the bound", err, sqlonce.ErrInProgress)
			l2, res, err := s.Claim(at(ctx, t0, deadline+margin+time.Millisecond), req, lease)
			wantLease(t, "retry after the bound", req, l2, res, err)
			if l2.Token <= l.Token {
				t.Fatalf("takeover token %d, not above %d", l2.Token, l.Token)
			}
			if got := keyRow(t, ctx, db, req.Scope, req.Key).LockedUntil; !got.Equal(t0.Add(deadline + margin + time.Millisecond + lease)) {
				t.Fatalf("the retry's lease (no option) until %v, want %v", got.Sub(t0), deadline+margin+time.Millisecond+lease)
			}

			// The same deadline without the option: the whole lease.
			req = dedupe.Request{Scope: "deadline", Key: "unbounded"}
			dctx, cancel = context.WithTimeout(ctx, deadline)
			l, res, err = claim(s, db, at(dctx, t0, 0), req)
			cancel()
			wantLease(t, "claim without the option", req, l, res, err)
			if got := keyRow(t, ctx, db, req.Scope, req.Key).LockedUntil; !got.Equal(t0.Add(lease)) {
				t.Fatalf("lease until %v, want %v", got.Sub(t0), lease)
			}

			// A deadline beyond the lease, or none: the lease asked for.
			far, cancel := context.WithTimeout(context.Background(), 2*lease)
			defer cancel()
			for key, c := range map[string]context.Context{"far": far, "none": context.Background()} {
				req := dedupe.Request{Scope: "deadline", Key: key}
				l, res, err := claim(s, db, at(c, t0, 0), req, dedupe.WithinDeadline(margin))
				wantLease(t, key+" deadline", req, l, res, err)
				if got := keyRow(t, ctx, db, req.Scope, req.Key).LockedUntil; !got.Equal(t0.Add(lease)) {
					t.Fatalf("%s deadline: lease until %v, want %v", key, got.Sub(t0), lease)
				}
			}

			// A deadline already past by more than the margin, a negative
			// margin, a nil option: refused, no row.
			past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Minute))
			defer cancel()
			_, _, err = claim(s, db, at(past, t0, 0), dedupe.Request{Scope: "deadline", Key: "past"}, dedupe.WithinDeadline(margin))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("claim past the deadline: %v, want context.DeadlineExceeded", err)
			}
			_, _, err = claim(s, db, at(ctx, t0, 0), dedupe.Request{Scope: "deadline", Key: "neg"}, dedupe.WithinDeadline(-time.Second))
			wantErr(t, "negative margin", err, sqlonce.ErrInvalidArgument)
			_, _, err = claim(s, db, at(ctx, t0, 0), dedupe.Request{Scope: "deadline", Key: "nil"}, nil)
			wantErr(t, "nil option", err, sqlonce.ErrInvalidArgument)
			for _, key := range []string{"past", "neg", "nil"} {
				if _, ok, err := db.Key(ctx, "deadline", key); err != nil || ok {
					t.Fatalf("key %q: row=%v err=%v, want none", key, ok, err)
				}
			}
		})
	}
}
