package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// The peers comparison, a few rounds on the real PostgreSQL: every
// technique is timed (first runs with 1 and 2 clients, repeats), and in
// the count phase each key's first run and its repeat leave exactly one
// ledger row and one record of the technique's own (a DBOS workflow, a
// River job, a sqlonce key). sqlonce's round trips are the ones
// tests/roundtrips holds.
func TestPeers(t *testing.T) {
	cfg := DefaultConfig()
	if dsn := os.Getenv(PostgresEnv); dsn != "" {
		cfg.PostgresDSN = dsn
	}
	reachable(t, "postgres", cfg)
	pc := DefaultPeersConfig()
	pc.PostgresDSN = cfg.PostgresDSN
	pc.Clients, pc.Rounds, pc.Duration, pc.Warmup, pc.CountOps = 2, 2, 300*time.Millisecond, 0, 8 // a round of 50ms completed no request once under load (CI)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunPeers(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	// round trips, first run / repeat; -1: not held here (the peers'
	// own counts are the page's, not a contract of this repository)
	want := map[string][2]float64{
		"bare":      {3, 0},
		"dedupe-do": {4, 3},
		"runsteps":  {6, 1},
		"dbos":      {-1, -1},
		"river":     {-1, -1},
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.ID] = true
		w, ok := want[r.ID]
		if !ok {
			t.Errorf("unexpected technique %s", r.ID)
			continue
		}
		if r.First1 == nil || r.FirstN == nil || r.First1.Ops == 0 || r.FirstN.Ops == 0 {
			t.Errorf("%s: first runs not timed: %+v %+v", r.ID, r.First1, r.FirstN)
			continue
		}
		if r.FirstWork == nil {
			t.Errorf("%s: first runs not counted", r.ID)
			continue
		}
		t.Logf("%-10s x%.2f (1 client) x%.2f (2 clients); round trips %.0f, WAL %.0f B, commits %.2f, WAL commits %.2f",
			r.ID, r.First1.Ratio, r.FirstN.Ratio, r.FirstWork.RoundTrips, r.FirstWork.WALBytes, r.FirstWork.Commits, r.FirstWork.WALCommits)
		if r.FirstWork.WALCommits < 1 {
			t.Errorf("%s: %.2f WAL commits per first run, want at least 1", r.ID, r.FirstWork.WALCommits)
		}
		if w[0] >= 0 && r.FirstWork.RoundTrips != w[0] {
			t.Errorf("%s: %.0f round trips per first run, want %.0f", r.ID, r.FirstWork.RoundTrips, w[0])
		}
		if r.ID == "bare" {
			if r.Repeat != nil || r.RepeatWork != nil || r.First1.Ratio != 1 {
				t.Errorf("bare: repeat %+v, ratio %v; want none and 1", r.Repeat, r.First1.Ratio)
			}
			continue
		}
		if r.Repeat == nil || r.Repeat.Ops == 0 || r.RepeatWork == nil {
			t.Errorf("%s: repeats not timed or counted", r.ID)
			continue
		}
		if w[1] >= 0 && r.RepeatWork.RoundTrips != w[1] {
			t.Errorf("%s: %.0f round trips per repeat, want %.0f", r.ID, r.RepeatWork.RoundTrips, w[1])
		}
		// The INSERT happened once per key, first run and repeat together,
		// and the technique kept one record of each key.
		if r.Keys != pc.CountOps || r.Rows != r.Keys || r.Records != r.Keys {
			t.Errorf("%s: %d keys, %d ledger rows, %d records; want %d of each", r.ID, r.Keys, r.Rows, r.Records, pc.CountOps)
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("technique %s did not run", id)
		}
	}
}
