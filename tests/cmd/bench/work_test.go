package main

import (
	"context"
	"math"
	"os"
	"testing"
	"time"
)

// The server's work per request, read back from PostgreSQL's WAL, counts
// what each technique writes: the bare INSERT one row and its two index
// entries (the ledger's primary key and ref), dedupe.Do one key more and
// its entries, DoResponse the response as an update of that key that
// writes no index entry (HOT), the lease two commits.
func TestServerWorkPostgres(t *testing.T) {
	cfg := DefaultConfig()
	if dsn := os.Getenv(PostgresEnv); dsn != "" {
		cfg.PostgresDSN = dsn
	}
	reachable(t, "postgres", cfg)
	cfg.Databases = []string{"postgres"}
	cfg.Clients, cfg.Rounds, cfg.Duration, cfg.Warmup, cfg.FaultRequests = 2, 1, 100*time.Millisecond, 0, 0
	cfg.RedisAddr = ""
	cfg.Only = []string{"dedupe-do", "dedupe-response", "dedupe-lease", "unique-insert"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// want: rows, HOT, index entries, commits per request. The expiry
	// index on sqlonce_keys takes one entry per key written.
	want := map[string][4]float64{
		"baseline":        {1, 0, 2, 1},
		"bare-order":      {1, 0, 3, 1},
		"unique-insert":   {1, 0, 3, 1},
		"dedupe-do":       {2, 0, 4, 1},
		"dedupe-response": {3, 1, 4, 1},
		"dedupe-lease":    {3, 0, 6, 2},
	}
	for _, r := range rep.Databases[0].Results {
		w := r.Work
		if w == nil {
			t.Fatalf("%s: no server work measured (pg_walinspect not available?)", r.ID)
		}
		t.Logf("%-16s WAL %4.0f B  rows %.2f  HOT %.2f  index %.2f  commits %.2f", r.ID, w.LogBytes, w.Rows, w.HOT, w.IndexEntries, w.Commits)
		exp, ok := want[r.ID]
		if !ok {
			continue
		}
		// A page split, a prune or autovacuum adds a little now and then.
		// An update is HOT only while its page has room: when a page
		// fills up, the update goes to another page and writes both
		// index entries of the key (primary key, expires_at) again. So
		// rows and commits are exact, an update meant to be HOT is HOT
		// for most requests, and each one that is not adds two entries.
		got := [4]float64{w.Rows, w.HOT, w.IndexEntries, w.Commits}
		bad := math.Abs(got[0]-exp[0]) > 0.1 || math.Abs(got[3]-exp[3]) > 0.1
		if exp[1] > 0 {
			missed := exp[1] - got[1]
			bad = bad || got[1] < exp[1]/2 || math.Abs(got[2]-(exp[2]+2*missed)) > 0.15
		} else {
			bad = bad || got[1] > 0.1 || math.Abs(got[2]-exp[2]) > 0.1
		}
		if bad {
			t.Errorf("%s: rows, HOT, index entries, commits per request %.2f %.2f %.2f %.2f; want %v",
				r.ID, w.Rows, w.HOT, w.IndexEntries, w.Commits, exp)
		}
		if w.LogBytes <= 0 {
			t.Errorf("%s: %v WAL bytes per request", r.ID, w.LogBytes)
		}
	}
}
