package main

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The comparison's claims, checked on a small run: sqlonce loses and
// doubles nothing; the unprotected transaction doubles every duplicate;
// SELECT then INSERT lets racing duplicates through; a Redis marker or
// token consumed before the commit loses every request whose server died
// in between.
func TestFaultAccounting(t *testing.T) {
	for _, db := range []string{"postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			cfg := DefaultConfig()
			if dsn := os.Getenv(PostgresEnv); dsn != "" {
				cfg.PostgresDSN = dsn
			}
			if dsn := os.Getenv(MySQLEnv); dsn != "" {
				cfg.MySQLDSN = dsn
			}
			reachable(t, db, cfg)
			cfg.Databases = []string{db}
			cfg.Clients = 4
			cfg.Rounds = 1
			cfg.Duration = 50 * time.Millisecond
			cfg.Warmup = 0
			cfg.FaultRequests = 40
			cfg.Lease = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Databases) != 1 {
				t.Fatalf("%d database reports, want 1", len(rep.Databases))
			}
			seen := map[string]bool{}
			for _, r := range rep.Databases[0].Results {
				seen[r.ID] = true
				if strings.HasSuffix(r.ID, "-replay") {
					// Every timed request was answered as a repeat with the
					// first answer (timed checks it); nothing to inject.
					t.Logf("%-22s %6.0f tx/s  x%.2f", r.ID, r.TPS, r.TimeRatio)
					if r.Ops == 0 || r.Fault != nil {
						t.Errorf("%s: %d timed requests, fault result %v; want some and none", r.ID, r.Ops, r.Fault)
					}
					continue
				}
				f := r.Fault
				if f == nil {
					t.Fatalf("%s: no fault result", r.ID)
				}
				t.Logf("%-16s %6.0f tx/s  x%.2f  crashes %d dups %d lost %d doubled %d gave up %d",
					r.ID, r.TPS, r.TimeRatio, f.Crashes, f.Duplicates, f.Lost, f.Doubled, f.GaveUp)
				if r.Ops == 0 || r.TPS <= 0 {
					t.Errorf("%s: no timed request measured", r.ID)
				}
				if f.Requests != cfg.FaultRequests || f.Crashes != cfg.FaultRequests/2 || f.Duplicates != cfg.FaultRequests/2 {
					t.Errorf("%s: %d requests, %d crashes, %d duplicates; want %d, %d, %d",
						r.ID, f.Requests, f.Crashes, f.Duplicates, cfg.FaultRequests, cfg.FaultRequests/2, cfg.FaultRequests/2)
				}
				if f.GaveUp != 0 {
					t.Errorf("%s: %d requests gave up", r.ID, f.GaveUp)
				}
				switch {
				case r.Kind == KindSqlonce:
					if f.Lost != 0 || f.Doubled != 0 {
						t.Errorf("%s: lost %d, doubled %d; want 0, 0", r.ID, f.Lost, f.Doubled)
					}
				case r.ID == "bare-order":
					// The unique code refuses every repeat (with an error).
					if f.Lost != 0 || f.Doubled != 0 {
						t.Errorf("%s: lost %d, doubled %d; want 0, 0", r.ID, f.Lost, f.Doubled)
					}
				case r.Kind == KindBaseline || r.Kind == KindReference:
					// No protection: every duplicate is applied too (after a
					// crash, the retry and the duplicate both are).
					if r.Kind == KindBaseline && r.TimeRatio != 1 {
						t.Errorf("baseline ratio %v, want 1", r.TimeRatio)
					}
					if f.Lost != 0 || f.Doubled != f.Duplicates {
						t.Errorf("%s: lost %d, doubled %d; want 0, %d", r.ID, f.Lost, f.Doubled, f.Duplicates)
					}
				case r.ID == "select-insert":
					if f.Lost != 0 || f.Doubled == 0 {
						t.Errorf("%s: lost %d, doubled %d; want 0 lost and duplicates let through", r.ID, f.Lost, f.Doubled)
					}
				case strings.HasPrefix(r.ID, "redis-"):
					if f.Lost != f.Crashes || f.Doubled != 0 {
						t.Errorf("%s: lost %d, doubled %d; want every crashed request (%d) lost, none doubled", r.ID, f.Lost, f.Doubled, f.Crashes)
					}
				default:
					t.Errorf("%s: no expectation for this technique", r.ID)
				}
			}
			ids := []string{"baseline", "bare-update", "bare-order", "dedupe-do", "dedupe-response", "dedupe-run", "dedupe-run-firstruns", "dedupe-response-replay", "dedupe-run-replay", "dedupe-run-repeats-replay", "unique-insert", "unique-insert-one", "optimistic", "statemachine", "dedupe-lease", "select-insert", "redis-setnx", "redis-token"}
			if db == "postgres" {
				ids = append(ids, "unique-inserted")
			} else if seen["unique-inserted"] {
				t.Error("unique-inserted ran on " + db)
			}
			for _, id := range ids {
				if !seen[id] {
					t.Errorf("technique %s did not run", id)
				}
			}
		})
	}
}

// reachable skips t when a server does not answer, or fails it under
// CI=true, where an unreachable service is a failure.
func reachable(t *testing.T, db string, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var err error
	what := ""
	switch db {
	case "postgres":
		what = "PostgreSQL (set " + PostgresEnv + ")"
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, cfg.PostgresDSN); err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
		}
	case "mysql":
		what = "MySQL/MariaDB (set " + MySQLEnv + ")"
		var c *sql.DB
		if c, err = sql.Open("mysql", cfg.MySQLDSN); err == nil {
			err = c.PingContext(ctx)
			c.Close()
		}
	}
	if err == nil {
		what = "Redis at " + cfg.RedisAddr
		rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
		err = rdb.Ping(ctx).Err()
		rdb.Close()
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s does not answer: %v", what, err)
	}
	t.Skipf("%s does not answer: %v", what, err)
}

// With -latency every request pays the delay on each of its round trips:
// the bare transaction (BEGIN, INSERT, COMMIT) at least three round trips
// of twice the delay. A lower bound, which a slow machine cannot break.
func TestLatencyView(t *testing.T) {
	cfg := DefaultConfig()
	if dsn := os.Getenv(PostgresEnv); dsn != "" {
		cfg.PostgresDSN = dsn
	}
	reachable(t, "postgres", cfg)
	cfg.Databases = []string{"postgres"}
	cfg.RedisAddr = ""
	cfg.Only = []string{"dedupe-run"}
	cfg.Clients, cfg.Rounds, cfg.Duration, cfg.Warmup, cfg.FaultRequests = 2, 1, 100*time.Millisecond, 0, 0
	cfg.Latency = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Databases[0].Results {
		t.Logf("%-16s p50 %.2f ms", r.ID, r.P50Ms)
		if r.P50Ms < 6 {
			t.Errorf("%s: p50 %.2f ms, below three round trips of 2 ms", r.ID, r.P50Ms)
		}
	}
}
