package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// BenchmarkInboxBatch applies a batch of BatchSize messages (one ledger row
// each) three ways, one after the other in each iteration, so that all
// three see the same moment of the machine:
//
//	bare     one transaction inserting the rows, no protection
//	batch    inbox.HandleBatch: the ids claimed together, the rows inserted
//	single   BatchSize inbox.Handle calls, a transaction each
//
//	cd tests && go test -run '^$' -bench InboxBatch -benchtime 30x ./bench/
//
// Reported: ns/bare, ns/batch, ns/single per batch of messages, and
// x_bare (batch / bare) and x_single (single / batch).
func BenchmarkInboxBatch(b *testing.B) {
	b.Run("postgres", func(b *testing.B) { benchInboxBatch(b, harness.Postgres) })
	b.Run("pgsql", func(b *testing.B) { benchInboxBatch(b, harness.PostgresSQL) })
	b.Run("mysql", func(b *testing.B) { benchInboxBatch(b, harness.MySQL) })
	b.Run("sqlite", func(b *testing.B) { benchInboxBatch(b, harness.SQLite) })
}

// BatchSize is the number of messages a consumer applies at once.
const BatchSize = 100

func benchInboxBatch[TTx any](b *testing.B, f harness.Factory[TTx]) {
	db := f(b, 4)
	in, err := inbox.New(db.Driver(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ids := func(kind string, n int) []string {
		s := make([]string, BatchSize)
		for i := range s {
			s[i] = fmt.Sprintf("%s-%d-%d", kind, n, i)
		}
		return s
	}
	insert := func(ctx context.Context, tx TTx, refs []string) error {
		for _, ref := range refs {
			if err := db.Tx(tx).LedgerInsert(ctx, ref, 1); err != nil {
				return err
			}
		}
		return nil
	}
	bare := func(n int) error {
		return harness.WithTx(ctx, db, harness.Default, func(tx TTx) error { return insert(ctx, tx, ids("bare", n)) })
	}
	batch := func(n int) error {
		res, err := in.HandleBatch(ctx, ids("batch", n), func(ctx context.Context, tx TTx, fresh []string) error {
			return insert(ctx, tx, fresh)
		})
		if err == nil && !res[0].FirstRun() {
			err = fmt.Errorf("batch %d: %v, want first run", n, res[0])
		}
		return err
	}
	single := func(n int) error {
		for _, id := range ids("single", n) {
			if _, err := in.Handle(ctx, id, func(ctx context.Context, tx TTx) error {
				return db.Tx(tx).LedgerInsert(ctx, id, 1)
			}); err != nil {
				return err
			}
		}
		return nil
	}
	ways := []func(int) error{bare, batch, single}
	for n := range 3 { // warm-up
		for _, w := range ways {
			if err := w(-n - 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	var took [3]time.Duration
	b.ResetTimer()
	for n := range b.N {
		for i, w := range ways {
			t0 := time.Now()
			if err := w(n); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(t0)
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d) / float64(b.N) }
	b.ReportMetric(per(took[0]), "ns/bare")
	b.ReportMetric(per(took[1]), "ns/batch")
	b.ReportMetric(per(took[2]), "ns/single")
	b.ReportMetric(per(took[1])/per(took[0]), "x_bare")
	b.ReportMetric(per(took[2])/per(took[1]), "x_single")
}
