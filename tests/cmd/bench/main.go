// Command bench measures, side by side on the same database, what each
// sqlonce strategy costs against the bare business transaction, and what
// the usual alternatives (SELECT then INSERT, a Redis SET NX marker, a
// Redis one-time token consumed by a Lua script) cost; then it injects
// faults (a crash before the commit, a duplicate arriving mid-flight) and
// counts from the database how many requests each technique lost or
// executed twice.
//
//	cd tests && go run ./cmd/bench                    # PostgreSQL and MariaDB, about a minute
//	go run ./cmd/bench -rounds 9 -duration 2s -faults 400   # longer, steadier
//	go run ./cmd/bench -csv out.csv -json out.json
//	go run ./cmd/bench -latency 250us                 # as across a LAN (0.5 ms round trips)
//	go run ./cmd/bench -peers                         # against DBOS Transact and River (PostgreSQL)
//
// The servers: SQLONCE_POSTGRES_DSN and SQLONCE_MYSQL_DSN, else the local
// services (PostgreSQL on 127.0.0.1:5432, MariaDB on 127.0.0.1:3306);
// Redis at -redis (127.0.0.1:6379; "off" leaves the Redis techniques
// out). Each run creates a schema (PostgreSQL) and a database (MariaDB)
// of its own and drops them at the end; -peers creates a PostgreSQL
// database of its own, with DBOS's and River's schemas, and drops it. See
// docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	cfg := DefaultConfig()
	if dsn := os.Getenv(PostgresEnv); dsn != "" {
		cfg.PostgresDSN = dsn
	}
	if dsn := os.Getenv(MySQLEnv); dsn != "" {
		cfg.MySQLDSN = dsn
	}
	var (
		dbs     = flag.String("db", strings.Join(cfg.Databases, ","), "databases to run on, in order: postgres, mysql")
		only    = flag.String("only", "", "comma-separated technique ids to run besides the baseline (default all): bare-update, bare-order, dedupe-do, dedupe-response, dedupe-run, dedupe-run-firstruns, dedupe-response-replay, dedupe-run-replay, dedupe-run-repeats-replay, unique-insert, unique-insert-one, unique-inserted (PostgreSQL), optimistic, statemachine, dedupe-lease, select-insert, redis-setnx, redis-token")
		csvPath = flag.String("csv", "", "also write the results as CSV to this file")
		jsPath  = flag.String("json", "", "also write the full report as JSON to this file")
		quiet   = flag.Bool("q", false, "no progress lines on stderr")
		peers   = flag.Bool("peers", false, "run the peers comparison instead (PostgreSQL only): the bare transaction, dedupe.Do, RunSteps, DBOS Transact and River, first runs with 1 and -clients clients, repeats, and per operation round trips, WAL and commits")
		countOp = flag.Int("count-ops", DefaultPeersConfig().CountOps, "with -peers: operations per technique in the untimed count phase")
	)
	flag.StringVar(&cfg.PostgresDSN, "postgres", cfg.PostgresDSN, "PostgreSQL server DSN (default $"+PostgresEnv+" or the local server)")
	flag.StringVar(&cfg.MySQLDSN, "mysql", cfg.MySQLDSN, "MySQL/MariaDB server DSN (default $"+MySQLEnv+" or the local server)")
	flag.StringVar(&cfg.RedisAddr, "redis", cfg.RedisAddr, `Redis address for the Redis techniques; "off" leaves them out`)
	flag.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients, the same for every technique")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "timed rounds; medians are reported")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of one technique's timed run per round")
	flag.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "untimed run per technique before the rounds")
	flag.IntVar(&cfg.FaultRequests, "faults", cfg.FaultRequests, "requests per technique under fault injection (0 skips)")
	flag.DurationVar(&cfg.Window, "window", cfg.Window, "how long a request holds its transaction open once its duplicate is sent")
	flag.DurationVar(&cfg.Lease, "lease", cfg.Lease, "dedupe lease duration")
	flag.DurationVar(&cfg.MarkerTTL, "redis-ttl", cfg.MarkerTTL, "expiry of the Redis marker and token")
	flag.DurationVar(&cfg.RetryBudget, "retry-budget", cfg.RetryBudget, "how long a client retries one request")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the per-round order of techniques")
	flag.DurationVar(&cfg.Latency, "latency", cfg.Latency, "put every server behind a proxy adding this delay each way (0.25ms: a LAN's 0.5 ms round trip); 0 connects directly")
	flag.Parse()

	cfg.Databases = split(*dbs)
	cfg.Only = split(*only)
	if cfg.RedisAddr == "off" {
		cfg.RedisAddr = ""
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *peers {
		pc := PeersConfig{PostgresDSN: cfg.PostgresDSN, Clients: cfg.Clients, Rounds: cfg.Rounds, Duration: cfg.Duration,
			Warmup: cfg.Warmup, CountOps: *countOp, Seed: cfg.Seed, Progress: cfg.Progress}
		if cfg.Latency > 0 {
			cfg.MySQLDSN, cfg.RedisAddr = "", ""
			stopNet, err := network(&cfg)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
			defer stopNet()
			pc.PostgresDSN = cfg.PostgresDSN
		}
		rep, err := RunPeers(ctx, pc)
		if err != nil {
			// The database is dropped by RunPeers even on failure.
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		rep.Command = strings.TrimSpace("go run ./cmd/bench " + strings.Join(os.Args[1:], " "))
		_ = WritePeersTable(os.Stdout, rep)
		if *jsPath != "" {
			f, err := os.Create(*jsPath)
			if err == nil {
				enc := json.NewEncoder(f)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
		}
		return
	}
	if *outboxFlag {
		os.Exit(mainOutbox(ctx, cfg, *jsPath))
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		// The schema and database are dropped by Run even on failure.
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	rep.Command = "go run ./cmd/bench " + strings.Join(os.Args[1:], " ")
	rep.Command = strings.TrimSpace(rep.Command)
	if err := WriteTable(os.Stdout, rep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer, *Report) error
	}{{*csvPath, WriteCSV}, {*jsPath, WriteJSON}} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, rep, out.write); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func writeFile(path string, rep *Report, write func(io.Writer, *Report) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
