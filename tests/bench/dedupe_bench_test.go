// Package bench measures what sqlonce costs, always against a baseline
// measured in the same run: the same business transaction without sqlonce.
//
//	cd tests && go test -run '^$' -bench . -benchtime 2000x ./bench/
//
// Each sub-benchmark runs Clients goroutines; every goroutine alternates one
// baseline transaction and one transaction of the path under test, so both
// see the same machine, the same server and the same moment. Reported:
//
//	ns/op        wall time per pair (baseline + path)
//	ns/baseline  mean latency of the baseline transaction
//	ns/path      mean latency of the path's transaction
//	x_baseline   ns/path divided by ns/baseline
//	allocs/op    Go allocations per pair, both transactions
package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// Clients is how many transactions run at once, as pgbench -c 8 does.
const Clients = 8

func BenchmarkDedupe(b *testing.B) {
	b.Run("postgres", func(b *testing.B) { benchDedupe(b, harness.Postgres) })
	b.Run("mysql", func(b *testing.B) { benchDedupe(b, harness.MySQL) })
}

type path[TTx any] struct {
	name string
	// setup runs once before timing.
	setup func(b *testing.B, db harness.DB[TTx], store *dedupe.Store[TTx])
	// op runs one transaction of the path; n is unique per call.
	op func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error
}

// response is what a typical JSON API answers: about 100 bytes.
var response = []byte(`{"order_id":123456789,"status":"accepted","amount":{"value":"100.00","currency":"EUR"},"ref":"r"}`)

const replayKeys = 1000

func benchDedupe[TTx any](b *testing.B, f harness.Factory[TTx]) {
	baseline := func(ctx context.Context, db harness.DB[TTx], n int64) error {
		return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			return db.Tx(tx).LedgerInsert(ctx, fmt.Sprintf("base-%d", n), 100)
		})
	}
	paths := []path[TTx]{
		{
			name: "first_run",
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("first-%d", n)
				return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
					_, err := store.Do(ctx, tx, dedupe.Request{Scope: "bench", Key: key}, func(ctx context.Context) error {
						return db.Tx(tx).LedgerInsert(ctx, key, 100)
					})
					return err
				})
			},
		},
		{
			name: "first_run_response_fingerprint",
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("resp-%d", n)
				fp := dedupe.Fingerprint([]byte("POST"), []byte("/orders"), []byte(key))
				return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
					_, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: fp}, func(ctx context.Context) ([]byte, error) {
						return response, db.Tx(tx).LedgerInsert(ctx, key, 100)
					})
					return err
				})
			},
		},
		{
			name:  "replay",
			setup: setupReplay[TTx],
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("replay-%d", (n%replayKeys+replayKeys)%replayKeys) // warm-up passes n < 0
				return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
					res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: dedupe.Fingerprint([]byte(key))}, func(ctx context.Context) ([]byte, error) {
						return nil, fmt.Errorf("replay path ran the work for %s", key)
					})
					if err == nil && !res.AlreadyDone() {
						err = fmt.Errorf("%s: %v, want already done", key, res)
					}
					return err
				})
			},
		},
		{
			name: "run_first_run_response_fingerprint",
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("run-%d", n)
				fp := dedupe.Fingerprint([]byte("POST"), []byte("/orders"), []byte(key))
				res, err := store.Run(ctx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: fp}, func(ctx context.Context, tx TTx) ([]byte, error) {
					return response, db.Tx(tx).LedgerInsert(ctx, key, 100)
				})
				if err == nil && !res.FirstRun() {
					err = fmt.Errorf("%s: %v, want first run", key, res)
				}
				return err
			},
		},
		{
			name:  "run_replay",
			setup: setupReplay[TTx],
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("replay-%d", (n%replayKeys+replayKeys)%replayKeys) // warm-up passes n < 0
				res, err := store.Run(ctx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: dedupe.Fingerprint([]byte(key))}, func(ctx context.Context, tx TTx) ([]byte, error) {
					return nil, fmt.Errorf("replay path ran the work for %s", key)
				})
				if err == nil && !res.AlreadyDone() {
					err = fmt.Errorf("%s: %v, want already done", key, res)
				}
				return err
			},
		},
		{
			name: "steps_first_run_one_db_step",
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				key := fmt.Sprintf("steps-%d", n)
				op := &dedupe.Operation[TTx]{Name: "bench", Steps: []dedupe.Step[TTx]{{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
					return response, db.Tx(tx).LedgerInsert(ctx, key, 100)
				}}}}
				res, err := store.RunSteps(ctx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: dedupe.Fingerprint([]byte(key))}, nil, op)
				if err == nil && !res.FirstRun() {
					err = fmt.Errorf("%s: %v, want first run", key, res)
				}
				return err
			},
		},
		{
			name: "lease_claim_complete",
			op: func(ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], n int64) error {
				req := dedupe.Request{Scope: "bench", Key: fmt.Sprintf("lease-%d", n)}
				l, _, err := store.Claim(ctx, req, time.Minute)
				if err != nil {
					return err
				}
				return store.Complete(ctx, l, response)
			},
		},
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			db := f(b, Clients+2)
			store, err := dedupe.New(db.Driver())
			if err != nil {
				b.Fatal(err)
			}
			if p.setup != nil {
				p.setup(b, db, store)
			}
			ctx := context.Background()
			// Warm up the pool and the server's caches.
			for i := range int64(50) {
				if err := baseline(ctx, db, -i-1); err != nil {
					b.Fatal(err)
				}
				if err := p.op(ctx, db, store, -i-1); err != nil {
					b.Fatal(err)
				}
			}
			var (
				seq              atomic.Int64
				baseNs, pathNs   atomic.Int64
				baseOps, pathOps atomic.Int64
				firstErr         atomic.Pointer[error]
			)
			b.ReportAllocs()
			b.SetParallelism((Clients + 1) / 2) // GOMAXPROCS is 2 on the reference machine
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					t0 := time.Now()
					if err := baseline(ctx, db, n); err != nil {
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					t1 := time.Now()
					if err := p.op(ctx, db, store, n); err != nil {
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					t2 := time.Now()
					baseNs.Add(int64(t1.Sub(t0)))
					pathNs.Add(int64(t2.Sub(t1)))
					baseOps.Add(1)
					pathOps.Add(1)
				}
			})
			b.StopTimer()
			if e := firstErr.Load(); e != nil {
				b.Fatal(*e)
			}
			base := float64(baseNs.Load()) / float64(baseOps.Load())
			pth := float64(pathNs.Load()) / float64(pathOps.Load())
			b.ReportMetric(base, "ns/baseline")
			b.ReportMetric(pth, "ns/path")
			b.ReportMetric(pth/base, "x_baseline")
		})
	}
}

// setupReplay records the keys the replay paths repeat.
func setupReplay[TTx any](b *testing.B, db harness.DB[TTx], store *dedupe.Store[TTx]) {
	ctx := context.Background()
	for i := range replayKeys {
		key := fmt.Sprintf("replay-%d", i)
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			_, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "bench", Key: key, Fingerprint: dedupe.Fingerprint([]byte(key))}, func(ctx context.Context) ([]byte, error) {
				return response, db.Tx(tx).LedgerInsert(ctx, key, 100)
			})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
