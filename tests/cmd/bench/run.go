package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/sqlonce/sqlonce"
)

// Config is one benchmark run.
type Config struct {
	// Databases to run on, in order: "postgres", "mysql".
	Databases   []string
	PostgresDSN string
	MySQLDSN    string
	// RedisAddr is the Redis server for the Redis techniques; "" leaves
	// them out.
	RedisAddr string
	// Clients is how many requests are in flight at once, for every
	// technique alike.
	Clients int
	// Rounds of timed runs; every round runs each technique once, in a
	// shuffled order. Medians over rounds are reported.
	Rounds int
	// Duration of one technique's timed run in one round.
	Duration time.Duration
	// Warmup is the length of each technique's untimed run before round 1.
	Warmup time.Duration
	// FaultRequests is how many requests each technique gets in the fault
	// phase; 0 skips it.
	FaultRequests int
	// Window is how long a request under fault injection holds its
	// transaction open, before the commit, once its duplicate is sent.
	Window time.Duration
	// Lease is the dedupe lease duration.
	Lease time.Duration
	// MarkerTTL is the expiry of the Redis marker and token.
	MarkerTTL time.Duration
	// RetryBudget is how long a client keeps retrying one request.
	RetryBudget time.Duration
	// Only, when not empty, runs only these technique ids (the baseline
	// always runs).
	Only []string
	// Seed orders the techniques within rounds.
	Seed uint64
	// Latency, when positive, puts every server behind a proxy that adds
	// it to each direction of every exchange: the view of a client across
	// a network, where each round trip costs a fixed time.
	Latency time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// DefaultConfig is a run of well under a minute per database on a small
// machine.
func DefaultConfig() Config {
	return Config{
		Databases:     []string{"postgres", "mysql"},
		PostgresDSN:   LocalPostgres,
		MySQLDSN:      LocalMySQL,
		RedisAddr:     "127.0.0.1:6379",
		Clients:       8,
		Rounds:        5,
		Duration:      400 * time.Millisecond,
		Warmup:        200 * time.Millisecond,
		FaultRequests: 120,
		Window:        30 * time.Millisecond,
		Lease:         500 * time.Millisecond,
		MarkerTTL:     5 * time.Minute,
		RetryBudget:   10 * time.Second,
		Seed:          1,
	}
}

// Report is everything one run measured.
type Report struct {
	Started   time.Time  `json:"started"`
	Seconds   float64    `json:"seconds"`
	Command   string     `json:"command"`
	Machine   Machine    `json:"machine"`
	Settings  Settings   `json:"settings"`
	Redis     *Server    `json:"redis,omitempty"`
	Databases []DBReport `json:"databases"`
}

// Settings is the part of Config that shapes the numbers.
type Settings struct {
	Clients       int     `json:"clients"`
	Rounds        int     `json:"rounds"`
	DurationMs    float64 `json:"duration_ms"`
	WarmupMs      float64 `json:"warmup_ms"`
	FaultRequests int     `json:"fault_requests"`
	WindowMs      float64 `json:"window_ms"`
	LeaseMs       float64 `json:"lease_ms"`
	MarkerTTLSec  float64 `json:"marker_ttl_s"`
	RetryBudgetS  float64 `json:"retry_budget_s"`
	LatencyMs     float64 `json:"latency_ms,omitempty"`
}

// Server describes a database or Redis server.
type Server struct {
	Name     string            `json:"name"`
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
}

// DBReport is one database's results.
type DBReport struct {
	Database string `json:"database"`
	Server   Server `json:"server"`
	// CPU is how the machine's CPU time went during the timed rounds.
	CPU     CPUUse   `json:"cpu_during_rounds"`
	Results []Result `json:"results"`
}

// Result is one technique on one database.
type Result struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Write string `json:"write"`
	// Medians over the rounds.
	TPS    float64 `json:"tps"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MeanMs float64 `json:"mean_ms"`
	// TimeRatio is the median over rounds of baseline throughput divided
	// by this technique's throughput in the same round: the time a
	// request costs relative to the bare transaction (1.25 = 25% more).
	TimeRatio float64 `json:"x_baseline"`
	// ThroughputRatio is the median of the inverse: this technique's
	// throughput as a fraction of the baseline's.
	// TimeRatioMin and TimeRatioMax are the smallest and largest of the
	// rounds' ratios: how far to trust the median.
	TimeRatioMin    float64 `json:"x_baseline_min"`
	TimeRatioMax    float64 `json:"x_baseline_max"`
	ThroughputRatio float64 `json:"throughput_vs_baseline"`
	// SameWriteAs names the unprotected technique that does the same
	// business write, when it is not the baseline; SameWriteRatio is
	// TimeRatio against it (against the baseline otherwise).
	SameWriteAs    string    `json:"same_write_as,omitempty"`
	SameWriteRatio float64   `json:"x_same_write"`
	RoundTPS       []float64 `json:"round_tps"`
	// Ops counts timed requests over all rounds; Retries the attempts
	// they needed beyond the first.
	Ops     int64 `json:"ops"`
	Retries int64 `json:"retries"`
	// Work is the server's work per request, medians over rounds; nil
	// when the server cannot tell.
	Work  *Work        `json:"work,omitempty"`
	Fault *FaultResult `json:"fault,omitempty"`
}

// FaultResult counts, from the database, what fault injection did to one
// technique's requests.
type FaultResult struct {
	Requests int `json:"requests"`
	// Crashes: requests whose first attempt died after the technique's
	// check and the business write, before the commit.
	Crashes int `json:"crashes"`
	// Duplicates: requests sent a second time while the first was in
	// flight.
	Duplicates int `json:"duplicates"`
	// Lost: requests whose business write is not in the database although
	// the client retried until the server gave an answer.
	Lost int `json:"lost"`
	// Doubled: requests whose business write is in the database more
	// than once.
	Doubled int `json:"doubled"`
	// GaveUp: requests still failing when the retry budget ran out (each
	// is also counted as lost if nothing was written).
	GaveUp int `json:"gave_up"`
}

func (c Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

func (c Config) check() error {
	switch {
	case c.Clients < 1:
		return fmt.Errorf("clients must be at least 1")
	case c.Rounds < 1:
		return fmt.Errorf("rounds must be at least 1")
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive")
	case c.FaultRequests < 0:
		return fmt.Errorf("fault requests must not be negative")
	case c.Lease <= 0 || c.MarkerTTL <= 0 || c.RetryBudget <= 0:
		return fmt.Errorf("lease, marker TTL and retry budget must be positive")
	case len(c.Databases) == 0:
		return fmt.Errorf("no database to run on")
	}
	for _, d := range c.Databases {
		if d != "postgres" && d != "mysql" {
			return fmt.Errorf("unknown database %q (postgres, mysql)", d)
		}
	}
	return nil
}

// poolSize leaves room for every client and its duplicate, plus the
// sessions that kill connections and count rows.
func (c Config) poolSize() int { return 2*c.Clients + 4 }

// Run runs the benchmark on every configured database.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	// The fault phase kills connections on purpose, and go-sql-driver logs
	// each; the benchmark counts them itself.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	if cfg.Latency > 0 {
		stop, err := network(&cfg)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	rep := &Report{
		Started: time.Now().UTC(),
		Machine: describeMachine(),
		Settings: Settings{
			Clients: cfg.Clients, Rounds: cfg.Rounds,
			DurationMs: ms(cfg.Duration), WarmupMs: ms(cfg.Warmup),
			FaultRequests: cfg.FaultRequests, WindowMs: ms(cfg.Window), LeaseMs: ms(cfg.Lease),
			MarkerTTLSec: cfg.MarkerTTL.Seconds(), RetryBudgetS: cfg.RetryBudget.Seconds(),
			LatencyMs: ms(cfg.Latency),
		},
	}
	var rdb *redis.Client
	runID := uniqueName("")
	redisPrefix := "sqlonce-bench:" + runID + ":"
	if cfg.RedisAddr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, PoolSize: cfg.poolSize()})
		defer rdb.Close()
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redis at %s does not answer (-redis off leaves the Redis techniques out): %w", cfg.RedisAddr, err)
		}
		s := describeRedis(ctx, rdb)
		rep.Redis = &s
		defer cleanRedis(rdb, redisPrefix)
	}
	for _, d := range cfg.Databases {
		var (
			dr  DBReport
			err error
		)
		switch d {
		case "postgres":
			dr, err = runWith(ctx, cfg, rdb, redisPrefix+"pg:", func() (*pgBackend, error) {
				return openPostgres(ctx, cfg.PostgresDSN, cfg.poolSize())
			})
		case "mysql":
			dr, err = runWith(ctx, cfg, rdb, redisPrefix+"my:", func() (*myBackend, error) {
				return openMySQL(ctx, cfg.MySQLDSN, cfg.poolSize())
			})
		}
		if err != nil {
			return rep, fmt.Errorf("%s: %w", d, err)
		}
		rep.Databases = append(rep.Databases, dr)
	}
	rep.Machine.LoadAfter = loadAvg()
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// runWith runs on a backend that open creates, and drops it afterwards.
func runWith[TTx any, B backend[TTx]](ctx context.Context, cfg Config, rdb *redis.Client, redisPrefix string, open func() (B, error)) (DBReport, error) {
	b, err := open()
	if err != nil {
		return DBReport{}, err
	}
	defer b.close()
	return runOn[TTx](ctx, cfg, b, rdb, redisPrefix)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// roundResult is one technique's timed run in one round.
type roundResult struct {
	tps, p50, p99, mean float64 // ms for the latencies
	ops, retries        int64
	work                *Work
}

func runOn[TTx any](ctx context.Context, cfg Config, b backend[TTx], rdb *redis.Client, redisPrefix string) (DBReport, error) {
	srv, err := b.server(ctx)
	if err != nil {
		return DBReport{}, fmt.Errorf("describe server: %w", err)
	}
	dr := DBReport{Database: b.name(), Server: srv}
	every, err := variants(b, rdb, redisPrefix, cfg)
	if err != nil {
		return dr, err
	}
	// A technique of another database is known, and left out here.
	known := map[string]bool{}
	var all []*variant
	for _, v := range every {
		known[v.ID] = true
		if v.db == "" || v.db == b.name() {
			all = append(all, v)
		}
	}
	// The baseline always runs, and so does the bare write a selected
	// technique is compared with.
	keep := map[string]bool{"baseline": true}
	for _, v := range all {
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, v.ID) {
			keep[v.ID] = true
			if v.bare != "" {
				keep[v.bare] = true
			}
		}
	}
	var vs []*variant
	index := map[string]int{}
	for _, v := range all {
		if keep[v.ID] {
			index[v.ID] = len(vs)
			vs = append(vs, v)
		}
	}
	for _, id := range cfg.Only {
		if !known[id] {
			return dr, fmt.Errorf("unknown technique %q", id)
		}
	}
	// fastest is the best throughput seen so far: it sizes the order rows
	// the update techniques need per run.
	var fastest float64
	runOne := func(v *variant, idx int, round string, d time.Duration) (roundResult, error) {
		rr, err := timed(ctx, cfg, b, v, fmt.Sprintf("%sv%d", round, idx), d, fastest)
		if err == nil {
			fastest = max(fastest, rr.tps)
		}
		return rr, err
	}
	for _, v := range vs {
		if v.prepare != nil {
			if err := v.prepare(ctx); err != nil {
				return dr, fmt.Errorf("prepare %s: %w", v.ID, err)
			}
		}
	}
	if cfg.Warmup > 0 {
		cfg.logf("%s: warm-up, %v per technique", b.name(), cfg.Warmup)
		for i, v := range vs {
			if _, err := runOne(v, i, "w", cfg.Warmup); err != nil {
				return dr, fmt.Errorf("warm-up %s: %w", v.ID, err)
			}
		}
	}
	rounds := make([][]roundResult, len(vs))
	cpuBefore := sampleCPU()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for r := range cfg.Rounds {
		order := rng.Perm(len(vs))
		cfg.logf("%s: round %d/%d", b.name(), r+1, cfg.Rounds)
		for _, i := range order {
			rr, err := runOne(vs[i], i, fmt.Sprintf("r%d", r), cfg.Duration)
			if err != nil {
				return dr, fmt.Errorf("round %d %s: %w", r+1, vs[i].ID, err)
			}
			rounds[i] = append(rounds[i], rr)
		}
	}
	dr.CPU = cpuUse(cpuBefore, sampleCPU())
	for i, v := range vs {
		res := Result{ID: v.ID, Name: v.Name, Kind: v.Kind, Write: v.Write, SameWriteAs: v.bare}
		same := index[v.bare] // used only when v.bare is set
		var tps, p50, p99, mean, timeRatio, tputRatio, sameRatio []float64
		var work []Work
		for r, rr := range rounds[i] {
			if rr.work != nil {
				work = append(work, *rr.work)
			}
			base := rounds[index["baseline"]][r]
			tps = append(tps, rr.tps)
			p50 = append(p50, rr.p50)
			p99 = append(p99, rr.p99)
			mean = append(mean, rr.mean)
			timeRatio = append(timeRatio, base.tps/rr.tps)
			tputRatio = append(tputRatio, rr.tps/base.tps)
			if v.bare != "" {
				sameRatio = append(sameRatio, rounds[same][r].tps/rr.tps)
			}
			res.Ops += rr.ops
			res.Retries += rr.retries
		}
		res.RoundTPS = tps
		res.Work = medianWork(work)
		res.TPS, res.P50Ms, res.P99Ms, res.MeanMs = median(tps), median(p50), median(p99), median(mean)
		res.TimeRatio, res.ThroughputRatio = median(timeRatio), median(tputRatio)
		res.TimeRatioMin, res.TimeRatioMax = slices.Min(timeRatio), slices.Max(timeRatio)
		res.SameWriteRatio = res.TimeRatio
		if v.bare != "" {
			res.SameWriteRatio = median(sameRatio)
		}
		dr.Results = append(dr.Results, res)
	}
	if cfg.FaultRequests > 0 {
		for i, v := range vs {
			if v.replays {
				continue
			}
			cfg.logf("%s: fault injection, %s", b.name(), v.ID)
			fr, err := faults(ctx, cfg, b, v, fmt.Sprintf("fv%d", i))
			if err != nil {
				return dr, fmt.Errorf("fault injection %s: %w", v.ID, err)
			}
			dr.Results[i].Fault = &fr
		}
	}
	return dr, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile by nearest rank on sorted durations, in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	i = min(max(i, 0), len(sorted)-1)
	return ms(sorted[i])
}

// newRequests builds n requests named prefix-0..prefix-(n-1), with an
// order each when v updates orders.
func newRequests[TTx any](ctx context.Context, b backend[TTx], v *variant, prefix string, n int) ([]*request, error) {
	reqs := make([]*request, n)
	for i := range reqs {
		reqs[i] = &request{seq: i, key: fmt.Sprintf("%s-%d", prefix, i)}
	}
	if v.orders {
		ids, err := b.createOrders(ctx, "o"+prefix, n)
		if err != nil {
			return nil, fmt.Errorf("create orders: %w", err)
		}
		for i, id := range ids {
			reqs[i].order = id
		}
	}
	return reqs, nil
}

// timed runs v with cfg.Clients clients for d and measures every request,
// from its first byte (token fetch included) to its answer, retries
// included.
func timed[TTx any](ctx context.Context, cfg Config, b backend[TTx], v *variant, prefix string, d time.Duration, fastest float64) (roundResult, error) {
	// Requests that update an order need the row beforehand: make three
	// times as many as the fastest technique so far could use; a run
	// that uses them all ends there (its throughput stays right).
	n := 1 << 30
	if v.orders {
		n = max(2000, int(3*fastest*d.Seconds())) + cfg.Clients
	}
	var reqs []*request
	if v.orders {
		var err error
		if reqs, err = newRequests(ctx, b, v, prefix, n); err != nil {
			return roundResult{}, err
		}
	}
	var (
		seq      atomic.Int64
		retries  atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	end, err := b.workStart(ctx)
	if err != nil {
		return roundResult{}, fmt.Errorf("server work: %w", err)
	}
	start := time.Now()
	deadline := start.Add(d)
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1024)
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(deadline) {
				i := seq.Add(1) - 1
				if i >= int64(n) {
					return
				}
				var r *request
				if reqs != nil {
					r = reqs[i]
				} else {
					r = &request{seq: int(i), key: fmt.Sprintf("%s-%d", prefix, i)}
				}
				t0 := time.Now()
				out, tries, err := serve(ctx, cfg, v, r, nil, true)
				switch {
				case err != nil:
				case v.replays && out != duplicate:
					err = fmt.Errorf("request %s: a repeat was applied again", r.key)
				case !v.replays && out != applied:
					err = fmt.Errorf("request %s: the first submission was taken for a duplicate", r.key)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				retries.Add(int64(tries - 1))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return roundResult{}, firstErr
	}
	if len(lat) == 0 {
		return roundResult{}, errors.New("no request completed")
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	var work *Work
	if end != nil {
		// The work columns are a reading beside the timing: a failed
		// reading (another run dropped the pg_walinspect it shared) leaves
		// this round out of their medians, not the run.
		if w, err := end(ctx, int64(len(lat))); err != nil {
			cfg.logf("%s: %s: server work not measured: %v", b.name(), v.ID, err)
		} else {
			work = &w
		}
	}
	return roundResult{
		work:    work,
		tps:     float64(len(lat)) / elapsed.Seconds(),
		p50:     percentile(lat, 0.50),
		p99:     percentile(lat, 0.99),
		mean:    ms(sum) / float64(len(lat)),
		ops:     int64(len(lat)),
		retries: retries.Load(),
	}, nil
}

// serve is the client: it sends r (after v.before when first is set) and
// retries, with the same identity, while the server fails, until it
// answers (applied, or refused as a duplicate) or the retry budget runs
// out (gave up: outcome 0, no error). Errors no retry can cure are
// returned.
func serve(ctx context.Context, cfg Config, v *variant, r *request, h hook, first bool) (out outcome, tries int, err error) {
	if first && v.before != nil {
		if err := v.before(ctx, r); err != nil {
			return 0, 1, err
		}
	}
	giveUp := time.Now().Add(cfg.RetryBudget)
	for tries = 1; ; tries++ {
		out, err = v.attempt(ctx, r, h)
		if err == nil {
			return out, tries, nil
		}
		if ctx.Err() != nil {
			return 0, tries, ctx.Err()
		}
		if !retryable(err) {
			return 0, tries, fmt.Errorf("request %s, attempt %d: %w", r.key, tries, err)
		}
		if time.Now().After(giveUp) {
			return 0, tries, nil
		}
		backoff := min(time.Duration(tries)*5*time.Millisecond, 100*time.Millisecond)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return 0, tries, ctx.Err()
		}
	}
}

// retryable says whether a client that got err should send the request
// again: the server died, the database asked for a retry, the key is
// held by someone else's transaction or lease, or the connection was lost.
func retryable(err error) bool {
	if errors.Is(err, errCrashed) || sqlonce.IsRetryable(err) ||
		errors.Is(err, sqlonce.ErrInProgress) || errors.Is(err, sqlonce.ErrLeaseLost) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "57P01" || pgErr.Code == "25P03") { // admin_shutdown, idle_in_transaction_session_timeout
		return true
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && (myErr.Number == 1927 || myErr.Number == 1053) { // connection killed, server shutdown
		return true
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// faults sends cfg.FaultRequests requests through v, cfg.Clients at a
// time. Request i gets, by i mod 4: a crash of its first attempt before
// the commit; a duplicate sent while it is in flight; both; nothing. Then
// the database says, per request, how many times its write is there.
func faults[TTx any](ctx context.Context, cfg Config, b backend[TTx], v *variant, prefix string) (FaultResult, error) {
	reqs, err := newRequests(ctx, b, v, prefix, cfg.FaultRequests)
	if err != nil {
		return FaultResult{}, err
	}
	fr := FaultResult{Requests: len(reqs)}
	var (
		work     = make(chan int)
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		gaveUp   atomic.Int64
		crashes  atomic.Int64
		dups     atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := reqs[i]
				crash, dup := i%4 == 0 || i%4 == 2, i%4 == 1 || i%4 == 2
				var (
					crashed, sent atomic.Bool
					dupWG         sync.WaitGroup
				)
				h := func(ctx context.Context) error {
					if dup && sent.CompareAndSwap(false, true) {
						dups.Add(1)
						dupWG.Add(1)
						go func() {
							defer dupWG.Done()
							out, _, err := serve(ctx, cfg, v, r, nil, false)
							if err != nil {
								fail(fmt.Errorf("duplicate: %w", err))
							} else if out == 0 {
								gaveUp.Add(1)
							}
						}()
						// Hold the transaction open while the duplicate
						// arrives and runs its check.
						time.Sleep(cfg.Window)
					}
					if crash && crashed.CompareAndSwap(false, true) {
						crashes.Add(1)
						return errCrash
					}
					return nil
				}
				out, _, err := serve(ctx, cfg, v, r, h, true)
				dupWG.Wait()
				if err != nil {
					fail(err)
				} else if out == 0 {
					gaveUp.Add(1)
				}
			}
		}()
	}
	for i := range reqs {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return fr, firstErr
	}
	fr.GaveUp = int(gaveUp.Load())
	fr.Crashes, fr.Duplicates = int(crashes.Load()), int(dups.Load())
	n, err := v.effects(ctx, prefix, reqs)
	if err != nil {
		return fr, fmt.Errorf("count effects: %w", err)
	}
	for _, k := range n {
		switch {
		case k == 0:
			fr.Lost++
		case k > 1:
			fr.Doubled++
		}
	}
	return fr, nil
}
