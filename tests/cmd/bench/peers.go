package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/wire"
)

// The peers comparison (-peers): one payment-like operation, a ledger
// INSERT keyed by an idempotency key, done by sqlonce's paths and by two
// Go libraries that offer the same guarantee on PostgreSQL another way:
//
//   - DBOS Transact: a workflow whose ID is the key, with one
//     RunAsTransaction step doing the INSERT. Its system tables live in a
//     schema of their own, on the same pool as the business tables, so the
//     step and its checkpoint commit in one transaction (DBOS's cheapest
//     configuration).
//   - River: InsertTx of a job unique by the key (UniqueOpts ByArgs on a
//     field tagged river:"unique"), beside the INSERT in one transaction;
//     a repeat finds the job and skips the INSERT. No worker runs the
//     jobs: the cost measured is the enqueue, not the job's work.
//
// Everything runs in a PostgreSQL database of its own, created for the
// run and dropped at its end, so that pg_stat_database's commit counter
// and the WAL records read back are the run's alone.

// PeersConfig is one run of the peers comparison.
type PeersConfig struct {
	PostgresDSN string
	// Clients is the larger client count of the first-run timing, and the
	// client count of the repeat timing; first runs are also timed with
	// one client.
	Clients int
	// Rounds of timed runs, each running every (technique, clients) pair
	// once in a shuffled order; medians over rounds are reported.
	Rounds   int
	Duration time.Duration
	Warmup   time.Duration
	// CountOps is how many operations, one at a time, the untimed count
	// phase sends per technique, first runs then repeats of the same keys.
	CountOps int
	Seed     uint64
	Progress io.Writer
}

// DefaultPeersConfig is a short run.
func DefaultPeersConfig() PeersConfig {
	return PeersConfig{
		PostgresDSN: LocalPostgres, Clients: 8, Rounds: 5,
		Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond,
		CountOps: 50, Seed: 1,
	}
}

func (c PeersConfig) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// PeersReport is what a peers run measured.
type PeersReport struct {
	Started  time.Time    `json:"started"`
	Seconds  float64      `json:"seconds"`
	Command  string       `json:"command"`
	Machine  Machine      `json:"machine"`
	Settings PeerSettings `json:"settings"`
	Server   Server       `json:"server"`
	// CPU is how the machine's CPU time went during the timed rounds.
	CPU     CPUUse       `json:"cpu_during_rounds"`
	Results []PeerResult `json:"results"`
}

// PeerSettings is the part of PeersConfig that shapes the numbers.
type PeerSettings struct {
	Clients    int     `json:"clients"`
	Rounds     int     `json:"rounds"`
	DurationMs float64 `json:"duration_ms"`
	WarmupMs   float64 `json:"warmup_ms"`
	CountOps   int     `json:"count_ops"`
	DBOS       string  `json:"dbos"`
	River      string  `json:"river"`
}

// PeerResult is one technique.
type PeerResult struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// First1 and FirstN time first runs with one client and with Clients;
	// Repeat times repeats of recorded keys with Clients (nil for the bare
	// transaction, which has none). Ratios are against the bare
	// transaction with the same clients in the same round.
	First1 *PeerTiming `json:"first_run_1_client"`
	FirstN *PeerTiming `json:"first_run_n_clients"`
	Repeat *PeerTiming `json:"repeat,omitempty"`
	// FirstWork and RepeatWork are per operation, from the count phase.
	FirstWork  *PeerWork `json:"first_run_work"`
	RepeatWork *PeerWork `json:"repeat_work,omitempty"`
	// Keys and Rows: after the count phase's first runs and repeats of
	// the same keys, how many keys and how many ledger rows they have
	// (equal when every INSERT happened once).
	Keys int `json:"keys"`
	Rows int `json:"rows"`
	// Records is how many of the peer's own records the keys have (DBOS
	// workflows, River jobs, sqlonce keys); -1 when not counted.
	Records int `json:"records"`
}

// PeerTiming is one timed configuration, medians over rounds.
type PeerTiming struct {
	TPS      float64 `json:"tps"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	Ratio    float64 `json:"x_bare"`
	RatioMin float64 `json:"x_bare_min"`
	RatioMax float64 `json:"x_bare_max"`
	Ops      int64   `json:"ops"`
}

// PeerWork is what one operation cost, counted one operation at a time.
type PeerWork struct {
	// RoundTrips is the median over operations of the round trips a
	// network would see (tests/internal/wire), statements likewise.
	RoundTrips float64 `json:"round_trips"`
	Statements float64 `json:"statements"`
	// WALBytes and FPIBytes: the WAL records of the run's database (and
	// their transactions' commit records), per operation; LSNBytes the
	// server's pg_current_wal_lsn moving, per operation (every session's
	// writes meanwhile, page headers included).
	WALBytes float64 `json:"wal_bytes"`
	FPIBytes float64 `json:"fpi_bytes"`
	LSNBytes float64 `json:"lsn_bytes"`
	// Commits is pg_stat_database.xact_commit of the run's database, per
	// operation: every transaction that committed, read-only and
	// single-statement ones included. WALCommits is the commit records
	// among WALBytes: the transactions that wrote, each a WAL flush.
	Commits    float64 `json:"commits"`
	WALCommits float64 `json:"wal_commits"`
}

// Versions of the peers, as tests/go.mod requires them.
const (
	dbosVersion  = "v1.8.0"
	riverVersion = "v0.51.2"
)

// peer is one technique on one pool.
type peer struct {
	id, name string
	// first does a first run of key; repeat a repeat of a key first done
	// before. Each reports applied or duplicate.
	first  func(ctx context.Context, key string) (outcome, error)
	repeat func(ctx context.Context, key string) (outcome, error)
	// records counts the peer's own records of the keys; nil if none.
	records func(ctx context.Context, keys []string) (int, error)
}

// peerSet is every technique, built on one pool.
type peerSet struct {
	peers []*peer
	close func()
}

// peerJob is River's job: unique by the key.
type peerJob struct {
	Key string `json:"key" river:"unique"`
}

func (peerJob) Kind() string { return "sqlonce_bench_payment" }

func (peerJob) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

const ledgerInsertSQL = "INSERT INTO ledger (ref, amount) VALUES ($1, $2)"

// newPeerSet builds the techniques on pool, whose search_path is the
// run's business schema; dbosSchema and riverSchema hold the peers'
// tables (migrated by the caller). executor names this set's DBOS
// executor. want, if not nil, says which of DBOS and River to build:
// sqlonce and River do nothing while idle, but DBOS's background loops
// commit a few transactions a second on pool, which would count in the
// other techniques' commits.
func newPeerSet(ctx context.Context, pool *pgxpool.Pool, dbosSchema, riverSchema, executor string, want func(id string) bool) (*peerSet, error) {
	if want == nil {
		want = func(string) bool { return true }
	}
	ps := &peerSet{}
	var closers []func()
	ps.close = func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	fail := func(err error) (*peerSet, error) {
		ps.close()
		return nil, err
	}
	drv, err := pgxdriver.New(pool)
	if err != nil {
		return fail(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		return fail(err)
	}
	inTx := poolTx(pool)
	sqlonceKeys := func(ctx context.Context, keys []string) (int, error) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM sqlonce_keys WHERE idempotency_key = ANY($1)", keys).Scan(&n)
		return n, err
	}

	bare := &peer{id: "bare", name: "bare transaction (INSERT, no key)",
		first: func(ctx context.Context, key string) (outcome, error) {
			return inTx(ctx, func(tx pgx.Tx) (outcome, error) {
				_, err := tx.Exec(ctx, ledgerInsertSQL, key, amount)
				return applied, err
			})
		}}

	doAttempt := func(ctx context.Context, key string) (outcome, error) {
		return inTx(ctx, func(tx pgx.Tx) (outcome, error) {
			res, err := store.Do(ctx, tx, dedupe.Request{Scope: scope, Key: key}, func(ctx context.Context) error {
				_, err := tx.Exec(ctx, ledgerInsertSQL, key, amount)
				return err
			})
			return fromResult(res.FirstRun()), err
		})
	}
	do := &peer{id: "dedupe-do", name: "sqlonce dedupe.Do (caller's transaction)",
		first: doAttempt, repeat: doAttempt, records: sqlonceKeys}

	stepsOp := func(key string) *dedupe.Operation[pgx.Tx] {
		want := response(key)
		return &dedupe.Operation[pgx.Tx]{Name: "payment", Steps: []dedupe.Step[pgx.Tx]{{
			Name: "ledger",
			InTx: func(ctx context.Context, tx pgx.Tx, _ dedupe.StepState) ([]byte, error) {
				_, err := tx.Exec(ctx, ledgerInsertSQL, key, amount)
				return want, err
			},
		}}}
	}
	stepsAttempt := func(ctx context.Context, key string) (outcome, error) {
		res, err := store.RunSteps(ctx, payment(key), nil, stepsOp(key))
		if err == nil {
			err = replayed(res, response(key))
		}
		return fromResult(res.FirstRun()), err
	}
	steps := &peer{id: "runsteps", name: "sqlonce RunSteps (one database step)",
		first: stepsAttempt, repeat: stepsAttempt,
		records: sqlonceKeys}

	ps.peers = []*peer{bare, do, steps}
	if want("dbos") {
		p, stop, err := newDBOSPeer(ctx, pool, dbosSchema, executor)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, stop)
		ps.peers = append(ps.peers, p)
	}
	if want("river") {
		p, err := newRiverPeer(pool, riverSchema)
		if err != nil {
			return fail(err)
		}
		ps.peers = append(ps.peers, p)
	}
	return ps, nil
}

// newDBOSPeer is the DBOS technique on pool: the system database is pool,
// its tables in dbosSchema; the data source is the same pool, so
// RunAsTransaction writes the step's checkpoint in the step's own
// transaction. stop shuts DBOS down (and closes pool).
func newDBOSPeer(ctx context.Context, pool *pgxpool.Pool, dbosSchema, executor string) (p *peer, stop func(), err error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName: "sqlonce-bench", SystemDBPool: pool, DatabaseSchema: dbosSchema,
		Logger: logger, ExecutorID: executor, ApplicationVersion: "bench",
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dbos: %w", err)
	}
	stop = func() { _ = dbos.Shutdown(dctx, 10*time.Second) }
	ds, err := dbos.NewDataSource(dctx, pool, dbos.WithDataSourceName("bench"), dbos.WithDataSourceSchema(dbosSchema))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("dbos data source: %w", err)
	}
	// ran notes the workflows whose step ran in this process, so that a
	// call can tell a first run from a repeat answered with the output.
	var ran sync.Map
	workflow := func(ctx dbos.Context, key string) (string, error) {
		return dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (string, error) {
			if _, err := tx.Exec(ctx, ledgerInsertSQL, key, amount); err != nil {
				return "", err
			}
			ran.Store(key, true)
			return string(response(key)), nil
		}, dbos.WithStepName("ledger"))
	}
	dbos.RegisterWorkflow(dctx, workflow, dbos.WithWorkflowName("payment"))
	if err := dbos.Launch(dctx); err != nil {
		return nil, nil, fmt.Errorf("dbos launch: %w", err)
	}
	dbosAttempt := func(ctx context.Context, key string) (outcome, error) {
		h, err := dbos.RunWorkflow(dctx, workflow, key, dbos.WithWorkflowID(key))
		if err != nil {
			return 0, err
		}
		got, err := h.GetResult()
		if err != nil {
			return 0, err
		}
		if got != string(response(key)) {
			return 0, fmt.Errorf("dbos: workflow %s answered %q", key, got)
		}
		if _, did := ran.LoadAndDelete(key); did {
			return applied, nil
		}
		return duplicate, nil
	}
	return &peer{id: "dbos", name: "DBOS workflow + RunAsTransaction",
		first: dbosAttempt, repeat: dbosAttempt,
		records: func(ctx context.Context, keys []string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.workflow_status WHERE workflow_uuid = ANY($1)",
				pgx.Identifier{dbosSchema}.Sanitize()), keys).Scan(&n)
			return n, err
		}}, stop, nil
}

// newRiverPeer is the River technique on pool: an insert-only client (no
// queues, no workers) whose tables are in riverSchema.
func newRiverPeer(pool *pgxpool.Pool, riverSchema string) (*peer, error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	inTx := poolTx(pool)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: riverSchema, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	riverAttempt := func(ctx context.Context, key string) (outcome, error) {
		return inTx(ctx, func(tx pgx.Tx) (outcome, error) {
			res, err := rc.InsertTx(ctx, tx, peerJob{Key: key}, nil)
			if err != nil {
				return 0, err
			}
			if res.UniqueSkippedAsDuplicate {
				return duplicate, nil
			}
			_, err = tx.Exec(ctx, ledgerInsertSQL, key, amount)
			return applied, err
		})
	}
	return &peer{id: "river", name: "River InsertTx (unique job) + INSERT",
		first: riverAttempt, repeat: riverAttempt,
		records: func(ctx context.Context, keys []string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s.river_job WHERE kind = $1 AND args->>'key' = ANY($2)",
				pgx.Identifier{riverSchema}.Sanitize()), peerJob{}.Kind(), keys).Scan(&n)
			return n, err
		}}, nil
}

// poolTx runs fn in a transaction of pool and commits.
func poolTx(pool *pgxpool.Pool) func(ctx context.Context, fn func(tx pgx.Tx) (outcome, error)) (outcome, error) {
	return func(ctx context.Context, fn func(tx pgx.Tx) (outcome, error)) (outcome, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		out, err := fn(tx)
		if err != nil {
			return 0, err
		}
		return out, tx.Commit(ctx)
	}
}

// withDatabase is dsn pointing at database db.
func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	return dsn + " dbname=" + db, nil
}

// peersDB is the run's own database, with the business schema (the bench's
// backend), DBOS's and River's schemas migrated.
type peersDB struct {
	b                       *pgBackend
	admin                   *pgx.Conn // on the server's own database, not the run's
	name, dsn               string
	dbosSchema, riverSchema string
	// flushSQL flushes a session's statistics (see flushStats).
	flushSQL string
}

func openPeersDB(ctx context.Context, server string, maxConns int) (*peersDB, error) {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect (set %s): %w", PostgresEnv, err)
	}
	d := &peersDB{admin: admin, name: uniqueName("bench_peers_")}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+d.name); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("postgres: create database: %w", err)
	}
	fail := func(err error) (*peersDB, error) {
		d.close()
		return nil, err
	}
	if d.dsn, err = withDatabase(server, d.name); err != nil {
		return fail(err)
	}
	if d.b, err = openPostgres(ctx, d.dsn, maxConns); err != nil {
		return fail(err)
	}
	d.dbosSchema, d.riverSchema = d.b.schema+"_dbos", d.b.schema+"_river"
	flushTable := pgx.Identifier{d.b.schema, "peer_stats_flush"}.Sanitize()
	d.flushSQL = "SELECT pg_stat_force_next_flush() FROM " + flushTable
	if _, err := d.b.pool.Exec(ctx, "CREATE TABLE "+flushTable+" (one int); INSERT INTO "+flushTable+" VALUES (1)", pgx.QueryExecModeSimpleProtocol); err != nil {
		return fail(err)
	}
	if _, err := d.b.pool.Exec(ctx, "CREATE SCHEMA "+d.riverSchema); err != nil {
		return fail(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(d.b.pool), &rivermigrate.Config{
		Schema: d.riverSchema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return fail(fmt.Errorf("river migrations: %w", err))
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fail(fmt.Errorf("river migrations: %w", err))
	}
	// DBOS migrates its schema when its context is created on the pool.
	if err := dbos.Migrate(ctx, d.dsn, dbos.WithMigrateSchema(d.dbosSchema),
		dbos.WithMigrateLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		return fail(fmt.Errorf("dbos migrations: %w", err))
	}
	return d, nil
}

func (d *peersDB) close() {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if d.b != nil {
		d.b.close()
	}
	_, _ = d.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
	d.admin.Close(ctx)
}

// xactCommit reads the run's database's commit counter.
func (d *peersDB) xactCommit(ctx context.Context) (int64, error) {
	var n int64
	err := d.admin.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", d.name).Scan(&n)
	return n, err
}

// lsn is the WAL flushed so far: every commit answered is below it.
func (d *peersDB) lsn(ctx context.Context) (string, error) {
	var s string
	err := d.admin.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&s)
	return s, err
}

// flushStats makes every idle connection of pool hand its pending
// statistics to the server now (they are flushed at most once a second
// otherwise): one statement each, committed, and counted in what it
// returns. The statement reads a table: a backend with no table's
// statistics pending skips the flush, and its commit counts with them.
func flushStats(ctx context.Context, pool *pgxpool.Pool, flushSQL string) (int64, error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		if _, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()", pgx.QueryExecModeSimpleProtocol); err != nil {
			return 0, err
		}
	}
	return int64(len(conns)), nil
}

// peerWALQuery sums the WAL records between two positions that touch the
// run's database, and every record of the transactions that wrote there
// (their commits).
const peerWALQuery = `
WITH r AS (
    SELECT w.xid::text::bigint AS xid, w.resource_manager AS rm, w.record_type AS rt,
           w.record_length AS len, w.fpi_length AS fpi,
           coalesce(w.block_ref, '') ~ ('rel \d+/' || $3::text || '/') AS ours
    FROM %s.pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) AS w
), x AS (
    SELECT DISTINCT xid FROM r WHERE ours AND xid <> 0
)
SELECT coalesce(sum(len), 0)::bigint, coalesce(sum(fpi), 0)::bigint,
       count(*) FILTER (WHERE rm = 'Transaction' AND rt ~ '^COMMIT')
FROM r WHERE ours OR xid IN (SELECT xid FROM x)`

// RunPeers runs the peers comparison on PostgreSQL.
func RunPeers(ctx context.Context, cfg PeersConfig) (*PeersReport, error) {
	switch {
	case cfg.Clients < 1 || cfg.Rounds < 1 || cfg.Duration <= 0 || cfg.CountOps < 1:
		return nil, errors.New("peers: clients, rounds, duration and count ops must be positive")
	}
	rep := &PeersReport{
		Started: time.Now().UTC(), Machine: describeMachine(),
		Settings: PeerSettings{Clients: cfg.Clients, Rounds: cfg.Rounds, DurationMs: ms(cfg.Duration),
			WarmupMs: ms(cfg.Warmup), CountOps: cfg.CountOps,
			DBOS: "github.com/dbos-inc/dbos-transact-golang " + dbosVersion, River: "github.com/riverqueue/river " + riverVersion},
	}
	setup, cancel := context.WithTimeout(ctx, 2*setupTimeout)
	d, err := openPeersDB(setup, cfg.PostgresDSN, 2*cfg.Clients+4)
	cancel()
	if err != nil {
		return nil, err
	}
	defer d.close()
	if rep.Server, err = d.b.server(ctx); err != nil {
		return nil, err
	}
	var dbOID int64
	if err := d.admin.QueryRow(ctx, "SELECT oid::bigint FROM pg_database WHERE datname = $1", d.name).Scan(&dbOID); err != nil {
		return nil, err
	}

	// The timed rounds, on a pool like the backend's (DBOS's Shutdown
	// closes the pool it was given).
	timedPool, err := pgxpool.NewWithConfig(ctx, d.b.pool.Config())
	if err != nil {
		return nil, err
	}
	defer timedPool.Close()
	timedSet, err := newPeerSet(ctx, timedPool, d.dbosSchema, d.riverSchema, "timed", nil)
	if err != nil {
		return nil, err
	}
	res, err := peerRounds(ctx, cfg, d, timedSet, rep)
	timedSet.close()
	if err != nil {
		return nil, err
	}
	rep.Results = res

	// The count phase, on a pool of its own behind a counting proxy.
	cfg.logf("peers: count phase, %d operations per technique", cfg.CountOps)
	if err := peerCounts(ctx, cfg, d, dbOID, rep); err != nil {
		return nil, err
	}
	rep.Machine.LoadAfter = loadAvg()
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// noWork is the backend without the work columns: the bench's WAL reading
// sees its own schema only, not the peers'.
type noWork struct{ *pgBackend }

func (noWork) workStart(context.Context) (meter, error) { return nil, nil }

// peerRun is one timed configuration of one technique.
type peerRun struct {
	p       *peer
	clients int
	repeat  bool
}

func peerRounds(ctx context.Context, cfg PeersConfig, d *peersDB, ps *peerSet, rep *PeersReport) ([]PeerResult, error) {
	var runs []peerRun
	for _, p := range ps.peers {
		runs = append(runs, peerRun{p, 1, false})
		if cfg.Clients != 1 {
			runs = append(runs, peerRun{p, cfg.Clients, false})
		}
		if p.repeat != nil {
			runs = append(runs, peerRun{p, cfg.Clients, true})
		}
	}
	vs := make([]*variant, len(runs))
	for i, r := range runs {
		v := &variant{ID: r.p.id, Name: r.p.name, replays: r.repeat}
		if r.repeat {
			prefix := "peer-replay-" + r.p.id
			v.prepare = func(ctx context.Context) error {
				for i := range replayKeys {
					if out, err := r.p.first(ctx, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
						return err
					} else if out != applied {
						return fmt.Errorf("%s: a first run was taken for a repeat", r.p.id)
					}
				}
				return nil
			}
			v.attempt = func(ctx context.Context, req *request, _ hook) (outcome, error) {
				return r.p.repeat(ctx, fmt.Sprintf("%s-%d", prefix, req.seq%replayKeys))
			}
		} else {
			v.attempt = func(ctx context.Context, req *request, _ hook) (outcome, error) {
				return r.p.first(ctx, req.key)
			}
		}
		vs[i] = v
		if v.prepare != nil {
			if err := v.prepare(ctx); err != nil {
				return nil, fmt.Errorf("prepare %s: %w", r.p.id, err)
			}
		}
	}
	b := noWork{d.b}
	bcfg := DefaultConfig()
	bcfg.RetryBudget = 10 * time.Second
	runOne := func(i int, round string, dur time.Duration) (roundResult, error) {
		c := bcfg
		c.Clients = runs[i].clients
		return timed[pgx.Tx](ctx, c, b, vs[i], fmt.Sprintf("p%s-%d", round, i), dur, 0)
	}
	if cfg.Warmup > 0 {
		cfg.logf("peers: warm-up, %v per technique and client count", cfg.Warmup)
		for i := range runs {
			if _, err := runOne(i, "w", cfg.Warmup); err != nil {
				return nil, fmt.Errorf("warm-up %s: %w", runs[i].p.id, err)
			}
		}
	}
	rounds := make([][]roundResult, len(runs))
	cpuBefore := sampleCPU()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for r := range cfg.Rounds {
		cfg.logf("peers: round %d/%d", r+1, cfg.Rounds)
		for _, i := range rng.Perm(len(runs)) {
			rr, err := runOne(i, fmt.Sprintf("r%d", r), cfg.Duration)
			if err != nil {
				return nil, fmt.Errorf("round %d %s (%d clients, repeat %v): %w", r+1, runs[i].p.id, runs[i].clients, runs[i].repeat, err)
			}
			rounds[i] = append(rounds[i], rr)
		}
	}
	rep.CPU = cpuUse(cpuBefore, sampleCPU())
	// bareAt is the bare transaction's run with c clients.
	bareAt := func(c int) int {
		for i, r := range runs {
			if r.p.id == "bare" && r.clients == c && !r.repeat {
				return i
			}
		}
		return -1
	}
	timing := func(i int) *PeerTiming {
		base := bareAt(runs[i].clients)
		var tps, p50, p99, ratio []float64
		t := &PeerTiming{}
		for r, rr := range rounds[i] {
			tps = append(tps, rr.tps)
			p50 = append(p50, rr.p50)
			p99 = append(p99, rr.p99)
			ratio = append(ratio, rounds[base][r].tps/rr.tps)
			t.Ops += rr.ops
		}
		t.TPS, t.P50Ms, t.P99Ms = median(tps), median(p50), median(p99)
		t.Ratio, t.RatioMin, t.RatioMax = median(ratio), slices.Min(ratio), slices.Max(ratio)
		return t
	}
	var out []PeerResult
	for _, p := range ps.peers {
		res := PeerResult{ID: p.id, Name: p.name, Records: -1}
		for i, r := range runs {
			if r.p != p {
				continue
			}
			switch {
			case r.repeat:
				res.Repeat = timing(i)
			case r.clients == 1:
				res.First1 = timing(i)
				if cfg.Clients == 1 {
					res.FirstN = res.First1
				}
			default:
				res.FirstN = timing(i)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// peerCounts counts, one operation at a time on a pool of its own behind
// a counting proxy, each technique's round trips, WAL and commits per
// first run and per repeat of the same keys, and checks the keys' effects.
func peerCounts(ctx context.Context, cfg PeersConfig, d *peersDB, dbOID int64, rep *PeersReport) error {
	pcfg, err := pgxpool.ParseConfig(d.b.adminDSN)
	if err != nil {
		return err
	}
	upstream := fmt.Sprintf("%s:%d", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	proxy, err := wire.Listen("postgres", upstream, 0)
	if err != nil {
		return err
	}
	defer proxy.Close()
	host, port, _ := strings.Cut(proxy.Addr(), ":")
	pcfg.ConnConfig.Host = host
	fmt.Sscan(port, &pcfg.ConnConfig.Port)
	pcfg.ConnConfig.RuntimeParams["search_path"] = d.b.schema
	pcfg.MaxConns, pcfg.MinConns = 4, 0
	// The pool pings a connection idle for over a second before handing it
	// out: a round trip that depends on timing, not on the path.
	pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	// A separate connection to the run's database reads the WAL back; it
	// flushes its statistics after each reading, outside any window.
	walConn, err := pgx.Connect(ctx, d.b.adminDSN)
	if err != nil {
		return err
	}
	defer walConn.Close(context.WithoutCancel(ctx))
	walQuery := fmt.Sprintf(peerWALQuery, pgx.Identifier{d.b.walinspect}.Sanitize())

	measure := func(pool *pgxpool.Pool, p *peer, prefix string, op func(ctx context.Context, key string) (outcome, error), want outcome, keys []string) (*PeerWork, error) {
		// Warm up the pool's connections and their statement caches on
		// keys of their own.
		for i := range 10 {
			if _, err := op(ctx, fmt.Sprintf("%s-warm-%d", prefix, i)); err != nil {
				return nil, err
			}
		}
		if _, err := flushStats(ctx, pool, d.flushSQL); err != nil {
			return nil, err
		}
		before, err := d.xactCommit(ctx)
		if err != nil {
			return nil, err
		}
		lsn0, err := d.lsn(ctx)
		if err != nil {
			return nil, err
		}
		rts := make([]float64, 0, len(keys))
		stmts := make([]float64, 0, len(keys))
		for _, k := range keys {
			proxy.Reset()
			out, err := op(ctx, k)
			c := proxy.Counts()
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", p.id, k, err)
			}
			if out != want {
				return nil, fmt.Errorf("%s %s: outcome %d, want %d", p.id, k, out, want)
			}
			rts = append(rts, float64(c.RoundTrips))
			stmts = append(stmts, float64(c.Statements))
		}
		lsn1, err := d.lsn(ctx)
		if err != nil {
			return nil, err
		}
		k, err := flushStats(ctx, pool, d.flushSQL)
		if err != nil {
			return nil, err
		}
		after, err := d.xactCommit(ctx)
		if err != nil {
			return nil, err
		}
		n := float64(len(keys))
		w := &PeerWork{RoundTrips: median(rts), Statements: median(stmts), Commits: float64(after-before-k) / n}
		var walBytes, fpi, commits, lsnBytes int64
		if err := walConn.QueryRow(ctx, "SELECT ($2::pg_lsn - $1::pg_lsn)::bigint", lsn0, lsn1).Scan(&lsnBytes); err != nil {
			return nil, err
		}
		// pg_walinspect refuses an empty range: nothing was written.
		if lsnBytes > 0 {
			if err := walConn.QueryRow(ctx, walQuery, lsn0, lsn1, fmt.Sprint(dbOID)).Scan(&walBytes, &fpi, &commits); err != nil {
				return nil, fmt.Errorf("read the WAL: %w", err)
			}
		}
		if _, err := walConn.Exec(ctx, d.flushSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return nil, err
		}
		w.WALBytes, w.FPIBytes, w.WALCommits, w.LSNBytes = float64(walBytes)/n, float64(fpi)/n, float64(commits)/n, float64(lsnBytes)/n
		return w, nil
	}

	// count is one technique's count phase, on a pool of its own and a set
	// built for it alone: DBOS's background work, on the pool it is given,
	// stays out of the other techniques' commits.
	count := func(res *PeerResult) error {
		pool, err := pgxpool.NewWithConfig(ctx, pcfg.Copy())
		if err != nil {
			return err
		}
		defer pool.Close()
		ps, err := newPeerSet(ctx, pool, d.dbosSchema, d.riverSchema, "counted-"+res.ID, func(id string) bool { return id == res.ID })
		if err != nil {
			return err
		}
		defer ps.close()
		i := slices.IndexFunc(ps.peers, func(p *peer) bool { return p.id == res.ID })
		if i < 0 {
			return fmt.Errorf("peers: no technique %s", res.ID)
		}
		p := ps.peers[i]
		prefix := "peer-count-" + p.id
		keys := make([]string, cfg.CountOps)
		for j := range keys {
			keys[j] = fmt.Sprintf("%s-%d", prefix, j)
		}
		cfg.logf("peers: counting %s", p.id)
		if res.FirstWork, err = measure(pool, p, prefix+"-first", p.first, applied, keys); err != nil {
			return err
		}
		if p.repeat == nil {
			return nil
		}
		if res.RepeatWork, err = measure(pool, p, prefix+"-repeat", p.repeat, duplicate, keys); err != nil {
			return err
		}
		rows, err := d.b.ledgerRows(ctx, prefix+"-")
		if err != nil {
			return err
		}
		res.Keys = len(keys)
		for _, k := range keys {
			res.Rows += int(rows[k])
		}
		if p.records != nil {
			if res.Records, err = p.records(ctx, keys); err != nil {
				return fmt.Errorf("%s: count records: %w", p.id, err)
			}
		}
		return nil
	}
	for i := range rep.Results {
		if err := count(&rep.Results[i]); err != nil {
			return err
		}
	}
	return nil
}

// WritePeersTable writes the peers report for people.
func WritePeersTable(w io.Writer, rep *PeersReport) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	m, s := rep.Machine, rep.Settings
	p("sqlonce peers comparison, %s (%.0f s)", rep.Started.Format("2006-01-02 15:04 MST"), rep.Seconds)
	if rep.Command != "" {
		p("command:  %s", rep.Command)
	}
	p("machine:  %s, %d CPUs (GOMAXPROCS %d), %.1f GiB, %s, kernel %s, %s", m.CPU, m.CPUs, m.GOMAXPROCS, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	p("load:     %s at start, %s at end (1/5/15 min)", m.LoadBefore, m.LoadAfter)
	p("peers:    %s, %s", s.DBOS, s.River)
	p("workload: first runs with 1 and %d clients, repeats with %d; %d rounds of %v each, shuffled per round, after a %v warm-up; medians over rounds",
		s.Clients, s.Clients, s.Rounds, msDur(s.DurationMs), msDur(s.WarmupMs))
	p("%s %s (%s)", rep.Server.Name, rep.Server.Version, settings(rep.Server.Settings))
	if c := rep.CPU; c != (CPUUse{}) {
		p("CPU time during the timed rounds, of all %d CPUs: benchmark clients %.0f%%, database and Redis servers %.0f%%, interrupts %.0f%%, other processes %.0f%%, stolen by the hypervisor %.0f%%",
			m.CPUs, 100*c.Bench, 100*c.Servers, 100*c.Interrupts, 100*c.Other, 100*c.Steal)
	}
	p("")
	width := len("technique")
	for _, r := range rep.Results {
		width = max(width, len(r.Name))
	}
	tm := func(t *PeerTiming) string {
		if t == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f (%.2f-%.2f) %5.0f/s", t.Ratio, t.RatioMin, t.RatioMax, t.TPS)
	}
	p("%-*s %-27s %-27s %-27s", width, "x bare (rounds) tx/s", "first run, 1 client", fmt.Sprintf("first run, %d clients", s.Clients), fmt.Sprintf("repeat, %d clients", s.Clients))
	for _, r := range rep.Results {
		p("%-*s %-27s %-27s %-27s", width, r.Name, tm(r.First1), tm(r.FirstN), tm(r.Repeat))
	}
	p("")
	p("%-*s %13s %13s %15s %13s %13s %9s", width, fmt.Sprintf("per operation (%d ops)", s.CountOps), "round trips", "statements", "WAL B (FPI)", "commits", "WAL commits", "effects")
	wk := func(w *PeerWork, f func(*PeerWork) string) string {
		if w == nil {
			return "-"
		}
		return f(w)
	}
	for _, r := range rep.Results {
		both := func(f func(*PeerWork) string) string {
			return wk(r.FirstWork, f) + " / " + wk(r.RepeatWork, f)
		}
		eff := "-"
		if r.Keys > 0 {
			eff = fmt.Sprintf("%d/%d", r.Rows, r.Keys)
		}
		p("%-*s %13s %13s %15s %13s %13s %9s", width, r.Name,
			both(func(w *PeerWork) string { return fmt.Sprintf("%.0f", w.RoundTrips) }),
			both(func(w *PeerWork) string { return fmt.Sprintf("%.0f", w.Statements) }),
			both(func(w *PeerWork) string { return fmt.Sprintf("%.0f (%.0f)", w.WALBytes, w.FPIBytes) }),
			both(func(w *PeerWork) string { return fmt.Sprintf("%.2f", w.Commits) }),
			both(func(w *PeerWork) string { return fmt.Sprintf("%.2f", w.WALCommits) }),
			eff)
	}
	p("")
	p("x bare: time per operation relative to the bare transaction with the same clients in the same round (repeats: against")
	p("        its first run with %d clients); median over rounds, then the lowest and highest round.", s.Clients)
	p("per operation: first run / repeat, counted one operation at a time on a pool of its own. Round trips and statements:")
	p("        median over operations, through a counting proxy. WAL B: the WAL records of the run's database and their")
	p("        transactions' commits (pg_walinspect), FPI the full-page images among them. commits: pg_stat_database.xact_commit")
	p("        of the run's database (every transaction, read-only ones included); WAL commits: the commit records (writing")
	p("        transactions). effects: ledger rows / keys after the first runs and the repeats of the same keys.")
	return nil
}
