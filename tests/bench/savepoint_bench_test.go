package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// BenchmarkSavepoints measures what PostgreSQL pays for savepoints left
// open until COMMIT (nested, one inside the other) against savepoints
// released after each write, in one transaction of n inserts, each under a
// savepoint of its own, as a transaction that calls unique.Insert in a
// loop runs them:
//
//	plain       INSERT                                     (the reference)
//	released    SAVEPOINT s; INSERT; RELEASE SAVEPOINT s
//	unreleased  SAVEPOINT s; INSERT                        (COMMIT releases them all)
//
//	cd tests && go test -run '^$' -bench Savepoints -benchtime 20x ./bench/
//
// The n inserts and their savepoints go to the server as one script (one
// round trip), so that the figures are the server's work, not round trips
// (which the round-trip counts give). Reported, per transaction of n
// inserts: ns/insert (the script's time divided by n), ns/commit (the
// COMMIT alone), and ns/read_during: while the transaction is still open,
// the mean time of another session's read of the rows it wrote (an index
// scan of n rows), whose visibility check looks the rows' subtransaction
// ids up (in pg_subtrans once the transaction has more than 64 of them,
// following each id's chain of parents to the top).
func BenchmarkSavepoints(b *testing.B) {
	for _, n := range []int{10, 64, 65, 1000} {
		for _, mode := range []string{"plain", "released", "unreleased"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, mode), func(b *testing.B) { benchSavepoints(b, n, mode) })
		}
	}
}

// reads is how many reads another session makes while the transaction is
// open.
const reads = 100

func benchSavepoints(b *testing.B, n int, mode string) {
	db := testdb.NewPostgres(b, 2)
	ctx := context.Background()
	reader, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer reader.Release()
	var script, commit, readDur time.Duration
	b.ResetTimer()
	for i := range b.N {
		ref := fmt.Sprintf("sp-%s-%d-%d", mode, n, i)
		var sb strings.Builder
		for j := range n {
			if mode != "plain" {
				fmt.Fprintf(&sb, "SAVEPOINT s%d;", j)
			}
			fmt.Fprintf(&sb, "INSERT INTO ledger (ref, amount) VALUES ('%s', %d);", ref, j)
			if mode == "released" {
				fmt.Fprintf(&sb, "RELEASE SAVEPOINT s%d;", j)
			}
		}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := tx.Exec(ctx, sb.String()); err != nil {
			b.Fatal(err)
		}
		script += time.Since(t0)
		// A transaction of another session that began after the writes
		// ends, as on any busy server: the reads' snapshots then cover
		// the writer's subtransaction ids instead of placing them all
		// beyond their horizon, and must look each one up.
		if _, err := reader.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
			b.Fatal(err)
		}
		r0 := time.Now()
		for range reads {
			var c int64
			if err := reader.QueryRow(ctx, "SELECT count(*) FROM ledger WHERE ref = $1", ref).Scan(&c); err != nil {
				b.Fatal(err)
			}
			if c != 0 {
				b.Fatalf("%d rows of an open transaction visible", c)
			}
		}
		readDur += time.Since(r0)
		c0 := time.Now()
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		commit += time.Since(c0)
	}
	b.StopTimer()
	N := float64(b.N)
	b.ReportMetric(float64(script.Nanoseconds())/N/float64(n), "ns/insert")
	b.ReportMetric(float64(commit.Nanoseconds())/N, "ns/commit")
	b.ReportMetric(float64(readDur.Nanoseconds())/N/reads, "ns/read_during")
}
