package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// BenchmarkObserve measures what an Observer costs a dedupe.Store.Run: the
// same operation on three Stores over one database, without an Observer,
// with one that does nothing, and with SlogObserver writing JSON records
// (every one, at Debug) to io.Discard. Every iteration runs the three in
// turn, one client, rotating which goes first, so that all see the same
// moment and no queue: the Observer's share of a call is largest there.
//
//	cd tests && go test -run '^$' -bench Observe -benchtime 1000x ./bench/
//
// Reported: ns/none, ns/noop, ns/slog (mean latency of each), x_noop and
// x_slog (their ratio to ns/none), and allocs_none, allocs_noop,
// allocs_slog: Go allocations of one call of each, from
// testing.AllocsPerRun before the timed loop.
func BenchmarkObserve(b *testing.B) {
	b.Run("postgres", func(b *testing.B) { benchObserve(b, harness.Postgres) })
	b.Run("mysql", func(b *testing.B) { benchObserve(b, harness.MySQL) })
	b.Run("sqlite", func(b *testing.B) { benchObserve(b, harness.SQLite) })
}

func benchObserve[TTx any](b *testing.B, f harness.Factory[TTx]) {
	type op func(ctx context.Context, s *dedupe.Store[TTx], n int64) error
	work := func(ctx context.Context, tx TTx) ([]byte, error) { return response, nil }
	paths := []struct {
		name  string
		setup bool
		op    op
	}{
		{"run_replay", true, func(ctx context.Context, s *dedupe.Store[TTx], n int64) error {
			key := fmt.Sprintf("replay-%d", (n%replayKeys+replayKeys)%replayKeys)
			res, err := s.Run(ctx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: dedupe.Fingerprint([]byte(key))}, work)
			if err == nil && !res.AlreadyDone() {
				err = fmt.Errorf("%s: %v, want already done", key, res)
			}
			return err
		}},
		{"run_first", false, func(ctx context.Context, s *dedupe.Store[TTx], n int64) error {
			_, err := s.Run(ctx, dedupe.Request{Scope: "bench", Key: fmt.Sprintf("first-%d", n)}, work)
			return err
		}},
	}
	noop := sqlonce.ObserverFunc(func(context.Context, sqlonce.Event) {})
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			db := f(b, Clients+2)
			var stores [3]*dedupe.Store[TTx]
			for i, d := range []sqlonce.Driver[TTx]{db.Driver(), sqlonce.Observe(db.Driver(), noop), sqlonce.Observe(db.Driver(), sqlonce.SlogObserver(logger))} {
				s, err := dedupe.New(d)
				if err != nil {
					b.Fatal(err)
				}
				stores[i] = s
			}
			if p.setup {
				setupReplay(b, db, stores[0])
			}
			ctx := context.Background()
			var seq atomic.Int64
			seq.Store(1 << 40) // apart from the keys of the warm-up and alloc runs
			for i := range int64(60) {
				if err := p.op(ctx, stores[i%3], -i-1); err != nil {
					b.Fatal(err)
				}
			}
			var allocs [3]float64
			for i, s := range stores {
				allocs[i] = testing.AllocsPerRun(100, func() {
					if err := p.op(ctx, s, seq.Add(1)*3+int64(i)); err != nil {
						b.Fatal(err)
					}
				})
			}
			var ns [3]int64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				n := seq.Add(1)
				for j := range int64(3) {
					v := (n + j) % 3
					t0 := time.Now()
					if err := p.op(ctx, stores[v], n*3+v); err != nil { // a key per Store
						b.Fatal(err)
					}
					ns[v] += int64(time.Since(t0))
				}
			}
			b.StopTimer()
			none, noopNs, slogNs := float64(ns[0])/float64(b.N), float64(ns[1])/float64(b.N), float64(ns[2])/float64(b.N)
			b.ReportMetric(none, "ns/none")
			b.ReportMetric(noopNs, "ns/noop")
			b.ReportMetric(slogNs, "ns/slog")
			b.ReportMetric(noopNs/none, "x_noop")
			b.ReportMetric(slogNs/none, "x_slog")
			b.ReportMetric(allocs[0], "allocs_none")
			b.ReportMetric(allocs[1], "allocs_noop")
			b.ReportMetric(allocs[2], "allocs_slog")
		})
	}
}
