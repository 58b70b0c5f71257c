package checker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/statemachine"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// The workloads, by the strategy they drive.
const (
	Do         = "dedupe.Do"
	DoResponse = "dedupe.DoResponse"
	DoPair     = "dedupe.Do pair"   // two keys in one transaction, in either order: deadlocks
	DoNested   = "dedupe.Do nested" // the same, the second claimed inside the first's work
	// DoNestedText is DoNested with the work reporting the inner error as
	// text (fmt.Errorf with %v), as much application code does.
	DoNestedText = "dedupe.Do nested, errors as text"
	Unique       = "unique.Insert"
	// UniqueOne and UniqueRows insert the codes of the Unique workload's
	// window with unique.Inserter.InsertOne and with ON CONFLICT (code)
	// DO NOTHING judged by unique.Inserted (not on MySQL, which has no
	// such statement), so that the three forms race on the same rows.
	UniqueOne    = "unique.InsertOne"
	UniqueRows   = "unique.Inserted"
	Optimistic   = "optimistic.Update"
	StateMachine = "statemachine"
	Lease        = "dedupe lease"
	// StoreRun is dedupe.Store.Run, in a transaction of the Store's own,
	// on the keys of the Do, DoResponse and lease workloads (one picked
	// per operation, among those running), so that it races them all.
	StoreRun = "dedupe.Store.Run"
	// DoBatch is dedupe.Store.DoBatch: a few keys of the Do workload's
	// window claimed in one transaction.
	DoBatch = "dedupe.DoBatch"
	// RunBatch is dedupe.Store.RunBatch (inbox.HandleBatch): DoBatch's
	// keys in a transaction of the Store's own.
	RunBatch = "dedupe.Store.RunBatch"
)

// AllOps lists every workload.
var AllOps = []string{Do, DoResponse, DoPair, DoNested, DoNestedText, Unique, UniqueOne, UniqueRows, Optimistic, StateMachine, Lease, StoreRun, DoBatch, RunBatch, LeaseDeadline, Steps}

// DurationEnv overrides the run length of every checker run (a Go
// duration: "5m").
const DurationEnv = "SQLONCE_CHECKER_DURATION"

// Duration returns the run length: flag if positive, else DurationEnv if
// set, else def (a fifth of it under -short).
func Duration(tb testing.TB, flag, def time.Duration) time.Duration {
	tb.Helper()
	if flag > 0 {
		return flag
	}
	if s := os.Getenv(DurationEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			tb.Fatalf("%s=%q: not a positive duration", DurationEnv, s)
		}
		return d
	}
	if testing.Short() {
		return def / 5 // make test-short, the inner loop
	}
	return def
}

// KnownBugsEnv, set to 1, runs the workloads and cases left out for known
// library bugs.
const KnownBugsEnv = "SQLONCE_KNOWN_BUGS"

// KnownBugs lists, per dialect, the workloads that hit a known library bug,
// and the bug. Empty: the last one (MySQL's Unclaim after a deadlock fn
// reported as text) is fixed by the token check in KeyDelete.
var KnownBugs = map[string]map[string]string{}

// Ops returns the workloads to run on db's dialect: all of them, except
// those that hit a known bug (logged) unless KnownBugsEnv is 1.
func Ops(tb testing.TB, dialect string) []string {
	tb.Helper()
	var ops []string
	for _, op := range AllOps {
		if op == UniqueRows && dialect == "mysql" {
			continue // no ON CONFLICT (code) on MySQL
		}
		if bug, ok := KnownBugs[dialect][op]; ok && os.Getenv(KnownBugsEnv) != "1" {
			tb.Logf("workload %q left out on %s, known bug (set %s=1 to run it): %s", op, dialect, KnownBugsEnv, bug)
			continue
		}
		if only := os.Getenv(OpsEnv); only != "" && !slices.Contains(strings.Split(only, ","), op) {
			continue
		}
		ops = append(ops, op)
	}
	return ops
}

// OpsEnv, set to workloads separated by commas ("dedupe.Do,dedupe.Store.RunBatch"),
// makes Ops return only those of its workloads: a finding reproduces faster
// with fewer workloads in its way.
const OpsEnv = "SQLONCE_CHECKER_OPS"

// DedupeCall describes one call of a Deduper.
type DedupeCall struct {
	Scope, Key string
	// Ref is the ledger ref fn writes: the business effect of the key.
	Ref string
	// Respond is true for DoResponse: the response must be recorded and
	// replayed.
	Respond bool
	// Shape indexes runShapes: the Store the StoreRun workload's call
	// runs on.
	Shape int
}

// Deduper runs fn at most once per key in tx and says whether it did. The
// default is the dedupe Store; tests swap in broken ones to show that the
// checker notices.
type Deduper[TTx any] func(ctx context.Context, db harness.DB[TTx], tx TTx, c DedupeCall, fn func(ctx context.Context) ([]byte, error)) (sqlonce.Result, error)

// Runner runs fn at most once per key in a transaction of its own, as
// dedupe.Store.Run does, and says whether it did. fn may be called more
// than once; only the call whose transaction commits may leave an effect.
// The default is the dedupe Store's Run; tests swap in broken ones.
type Runner[TTx any] func(ctx context.Context, db harness.DB[TTx], c DedupeCall, fn func(ctx context.Context, tx TTx) ([]byte, error)) (sqlonce.Result, error)

// Config shapes a run. Zero fields take the defaults.
type Config[TTx any] struct {
	// Workers is the number of concurrent workers (64).
	Workers int
	// Keys is how many keys of each workload are live at once (16): small,
	// so that concurrent duplicates collide all the time.
	Keys int
	// Hits is how many operations, on average, a key gets before the
	// window of live keys moves past it (8).
	Hits int
	// Duration is how long workers start new operations (10s).
	Duration time.Duration
	// Enough, if set, is asked after Duration: workers go on starting
	// operations until it reports true, for at most 30s more. A
	// test that needs every fault of a kind to have fired sets it, so
	// that a run on a loaded machine, which commits less in Duration,
	// still sees them all.
	Enough func() bool
	// FaultRate is the share of attempts that get a fault (0.3); negative
	// disables faults.
	FaultRate float64
	// Ops lists the workloads to run (AllOps).
	Ops []string
	// Isolations are picked at random per transaction (READ COMMITTED,
	// REPEATABLE READ, SERIALIZABLE).
	Isolations []harness.Isolation
	// Dedupe replaces the dedupe Store for the Do, DoResponse, pair and
	// nested workloads.
	Dedupe Deduper[TTx]
	// Run replaces dedupe.Store.Run for the StoreRun workload.
	Run Runner[TTx]
	// Lease is the lease length in the pinned database clock (10s). The
	// pinned clock runs ClockSpeed times faster than real time, so leases
	// lapse within a fraction of a second of real time without sleeping.
	Lease time.Duration
	// ClockSpeed is how much faster than real time the pinned clock of the
	// lease workload runs (50).
	ClockSpeed int
	// During, if set, runs alongside the workload (the restart test stops
	// and starts the server from it). Run waits for it before checking.
	During func(ctx context.Context, logf func(format string, args ...any))
	// Seed seeds the workers' random choices (random when 0; logged).
	Seed uint64
	// ConnectRetry is how long a worker keeps retrying to begin a
	// transaction before giving up an operation (2s).
	ConnectRetry time.Duration
	// AttemptTimeout bounds one attempt (30s): a worker that waits longer
	// on a lock is stuck, which the run reports as an error. It must
	// exceed the server's own bounds on a wait, so that the server's error
	// ends a wait that lasts, not the checker's.
	AttemptTimeout time.Duration
	// Nodes are more views of db's database, each on another node of a
	// cluster whose nodes all take writes (Galera). Each worker sends each
	// attempt to the next node in turn, db included, as clients behind a
	// round-robin balancer do, so that the duplicates of a key and a
	// lease's claim and completion meet on different nodes. The
	// invariants are checked through db.
	Nodes []harness.DB[TTx]
	// NoKill leaves out the faults that kill a connection from another
	// session (FaultKill, FaultKillAsync).
	NoKill bool
	// NoLockWait leaves out the StoreRun workload's Store WithNoWait: for
	// a driver that refuses a bounded lock wait (the MySQL driver through
	// vtgate).
	NoLockWait bool
	// Proxy, when set, is the fault proxy db's pool connects through
	// (harness.Reopen with Settings.Addr): the network faults (netfaults.go)
	// join the faults drawn for transactions and Run calls.
	Proxy *faultproxy.Proxy
}

func (c *Config[TTx]) defaults() {
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.Keys <= 0 {
		c.Keys = 16
	}
	if c.Hits <= 0 {
		c.Hits = 8
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.FaultRate == 0 {
		c.FaultRate = 0.3
	}
	if len(c.Ops) == 0 {
		c.Ops = AllOps
	}
	if len(c.Isolations) == 0 {
		c.Isolations = harness.Isolations
	}
	if c.Lease <= 0 {
		c.Lease = 10 * time.Second
	}
	if c.ClockSpeed <= 0 {
		c.ClockSpeed = 50
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.ConnectRetry <= 0 {
		c.ConnectRetry = 2 * time.Second
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 30 * time.Second
	}
}

// keyTTL is the dedupe TTL of every key: far beyond any run, including the
// pinned clock of the lease workload, so that no key expires and every
// repeat must be AlreadyDone.
const keyTTL = 10000 * time.Hour

type run[TTx any] struct {
	t     testing.TB
	ctx   context.Context
	db    harness.DB[TTx]
	cfg   Config[TTx]
	nodes []*node[TTx] // db first, then cfg.Nodes
	sm    *statemachine.Machine[string]

	lclock atomic.Int64 // logical clock: orders reports against commits
	ids    atomic.Int64 // attempt ids
	vclock *virtualClock
	stop   atomic.Bool

	windows  map[string]*atomic.Int64
	optIDs   []int64
	smOrders sync.Map // key -> order id
	smMu     sync.Mutex

	mu       sync.Mutex
	attempts []*Attempt
	notes    map[string]int // events outside attempts (external calls, ...)
	leases   sync.Map       // lease keys used

	runTargets []runTarget  // the key families the StoreRun workload hits
	ldKeys     atomic.Int64 // keys of the LeaseDeadline workload
	// txFaults and runFaults are the faults drawn for transactions and
	// Run calls: the package's lists, with the network faults when
	// Config.Proxy is set.
	txFaults, runFaults []Fault
	leaseFaults         []Fault // leaseFaults, without the kills under NoKill

	steps           *stepsState // the Steps workload's
	stepsViolations []Violation // guarded by steps.mu
}

func (r *run[TTx]) tick() int64 { return r.lclock.Add(1) }

func (r *run[TTx]) note(what string, n int) {
	r.mu.Lock()
	r.notes[what] += n
	r.mu.Unlock()
}

func (r *run[TTx]) record(a *Attempt) {
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

func (r *run[TTx]) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("%s: "+format, append([]any{r.db.Dialect()}, args...)...)
}

// enoughLimit bounds the time a run goes on past Config.Duration for
// Config.Enough.
const enoughLimit = 30 * time.Second

// Run drives the workload on db for cfg.Duration, then checks the
// invariants from the database and returns the report. It fails t only
// for setup errors; the caller decides what violations mean.
func Run[TTx any](t testing.TB, db harness.DB[TTx], cfg Config[TTx]) *Report {
	t.Helper()
	cfg.defaults()
	r := &run[TTx]{
		t: t, ctx: context.Background(), db: db, cfg: cfg,
		sm:      statemachine.Must(statemachine.New(statemachine.Edge("created", "paid"))),
		windows: map[string]*atomic.Int64{},
		notes:   map[string]int{},
	}
	for _, ndb := range append([]harness.DB[TTx]{db}, cfg.Nodes...) {
		n, err := newNode(ndb)
		if err != nil {
			t.Fatal(err)
		}
		r.nodes = append(r.nodes, n)
	}
	if r.cfg.Dedupe == nil {
		r.cfg.Dedupe = r.storeDedupe
	}
	if r.cfg.Run == nil {
		r.cfg.Run = r.storeRun
	}
	for _, op := range cfg.Ops {
		r.windows[op] = new(atomic.Int64)
	}
	r.runTargets = r.targetsOfRun()
	r.txFaults, r.runFaults, r.leaseFaults = txFaults, runFaults, leaseFaults
	if cfg.Proxy != nil {
		r.txFaults = append(slices.Clone(txFaults), netFaults...)
		r.runFaults = append(slices.Clone(runFaults), netFaults...)
	}
	if cfg.NoKill {
		kill := func(f Fault) bool { return f == FaultKill || f == FaultKillAsync }
		r.txFaults = slices.DeleteFunc(slices.Clone(r.txFaults), kill)
		r.runFaults = slices.DeleteFunc(slices.Clone(r.runFaults), kill)
		r.leaseFaults = slices.DeleteFunc(slices.Clone(r.leaseFaults), kill)
	}
	if err := r.setup(); err != nil {
		t.Fatalf("checker setup: %v", err)
	}
	r.logf("seed %d, %d workers, %d live keys per workload, %v, fault rate %.2f",
		cfg.Seed, cfg.Workers, cfg.Keys, cfg.Duration, max(cfg.FaultRate, 0))

	start := time.Now()
	r.vclock = newVirtualClock(cfg.ClockSpeed)
	var wg sync.WaitGroup
	stepsDone := make(chan struct{})
	if r.enabled(Steps) {
		r.steps = newStepsState()
		wg.Add(1)
		go func() { defer wg.Done(); r.resumeSteps(stepsDone) }()
	}
	for i := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker(r, i, newRand(cfg.Seed, uint64(i)))
			w.loop()
		}()
	}
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if cfg.During != nil {
			cfg.During(r.ctx, func(format string, args ...any) { r.logf(format, args...) })
		}
	}()
	time.Sleep(cfg.Duration)
	if cfg.Enough != nil && !cfg.Enough() {
		for limit := time.Now().Add(enoughLimit); !cfg.Enough() && time.Now().Before(limit); {
			time.Sleep(50 * time.Millisecond)
		}
		r.logf("ran %v: Enough asked for more than %v", time.Since(start).Round(time.Millisecond), cfg.Duration)
	}
	r.stop.Store(true)
	stopped := time.Now()
	close(stepsDone)
	wg.Wait()
	<-duringDone
	elapsed := time.Since(start)
	drained := time.Since(stopped)

	rep := &Report{Dialect: db.Dialect(), Elapsed: elapsed, Config: fmt.Sprintf("%d workers, %d keys, %d hits", cfg.Workers, cfg.Keys, cfg.Hits)}
	vEnd := r.vclock.Now()
	if r.enabled(Lease) {
		r.recoverLeases(rep, vEnd)
	}
	if r.enabled(Steps) {
		r.settleSteps(rep, vEnd)
	}
	r.vclock.Stop()
	settled := time.Since(start) - elapsed
	snap, err := snapshot(r.ctx, db)
	if err != nil {
		t.Fatalf("read the database back: %v", err)
	}
	rep.Attempts = r.attempts
	rep.notes = r.notes
	r.verify(rep, snap, vEnd)
	rep.summarize()
	r.logf("workers drained in %v after the stop, leases settled in %v, checked in %v",
		drained.Round(time.Millisecond), settled.Round(time.Millisecond), (time.Since(start) - elapsed - settled).Round(time.Millisecond))
	return rep
}

func (r *run[TTx]) enabled(op string) bool {
	_, ok := r.windows[op]
	return ok
}

// setup creates the orders the optimistic workload updates.
func (r *run[TTx]) setup() error {
	if !r.enabled(Optimistic) {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	for i := range r.cfg.Keys {
		code := fmt.Sprintf("opt:%d", i)
		var id int64
		err := retryConn(ctx, func() error {
			var err error
			id, err = r.db.Pool().OrderInsert(ctx, code, code, 0)
			if err != nil {
				if o, gerr := r.db.Pool().OrderGetByCode(ctx, code); gerr == nil {
					id, err = o.ID, nil
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create order %s: %w", code, err)
		}
		r.optIDs = append(r.optIDs, id)
	}
	return nil
}

// smOrder returns the id of the order the statemachine workload moves for
// key, creating it on first use.
func (r *run[TTx]) smOrder(ctx context.Context, key string) (int64, error) {
	if id, ok := r.smOrders.Load(key); ok {
		return id.(int64), nil
	}
	r.smMu.Lock()
	defer r.smMu.Unlock()
	if id, ok := r.smOrders.Load(key); ok {
		return id.(int64), nil
	}
	code := "sm:" + key
	id, err := r.db.Pool().OrderInsert(ctx, code, code, 0)
	if err != nil {
		// A lost reply to an earlier insert may have created it.
		o, gerr := r.db.Pool().OrderGetByCode(ctx, code)
		if gerr != nil {
			return 0, err
		}
		id = o.ID
	}
	r.smOrders.Store(key, id)
	return id, nil
}

// retryConn retries fn for a while: setup runs while a restart test may
// have the server down.
func retryConn(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeDedupe is the real thing.
func (r *run[TTx]) storeDedupe(ctx context.Context, db harness.DB[TTx], tx TTx, c DedupeCall, fn func(ctx context.Context) ([]byte, error)) (sqlonce.Result, error) {
	req := dedupe.Request{Scope: c.Scope, Key: c.Key}
	if c.Respond {
		return r.nodeOf(db).store.DoResponse(ctx, tx, req, fn)
	}
	return r.nodeOf(db).store.Do(ctx, tx, req, func(ctx context.Context) error {
		_, err := fn(ctx)
		return err
	})
}

// storeRun is the real thing.
func (r *run[TTx]) storeRun(ctx context.Context, db harness.DB[TTx], c DedupeCall, fn func(ctx context.Context, tx TTx) ([]byte, error)) (sqlonce.Result, error) {
	return r.nodeOf(db).runStores[c.Shape].Run(ctx, dedupe.Request{Scope: c.Scope, Key: c.Key}, fn)
}

// SelectThenInsert is the anti-pattern the design notes warn about, shaped
// as a Deduper: look for the effect, and do the work if it is not there.
// No marker, no constraint: two concurrent calls both see "absent".
func SelectThenInsert[TTx any]() Deduper[TTx] {
	return func(ctx context.Context, db harness.DB[TTx], tx TTx, c DedupeCall, fn func(ctx context.Context) ([]byte, error)) (sqlonce.Result, error) {
		exists, err := db.Tx(tx).LedgerExistsByRef(ctx, c.Ref)
		if err != nil {
			return sqlonce.Result{}, err
		}
		if exists {
			return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
		}
		resp, err := fn(ctx)
		if err != nil {
			return sqlonce.Result{}, err
		}
		return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
	}
}

// MarkerFirst is the "delete the token before the work" answer of the
// design notes, shaped as a Deduper: the marker commits in a transaction of
// its own, then the work runs in the caller's. A failure between the two
// loses the request: every retry is told AlreadyDone.
func MarkerFirst[TTx any]() Deduper[TTx] {
	return func(ctx context.Context, db harness.DB[TTx], tx TTx, c DedupeCall, fn func(ctx context.Context) ([]byte, error)) (sqlonce.Result, error) {
		store, err := dedupe.New(db.Driver(), dedupe.WithTTL(keyTTL))
		if err != nil {
			return sqlonce.Result{}, err
		}
		var res sqlonce.Result
		err = harness.WithTx(ctx, db, harness.ReadCommitted, func(own TTx) error {
			var err error
			res, err = store.Do(ctx, own, dedupe.Request{Scope: c.Scope, Key: c.Key}, func(context.Context) error { return nil })
			return err
		})
		if err != nil || res.AlreadyDone() {
			return res, err
		}
		resp, err := fn(ctx)
		if err != nil {
			return sqlonce.Result{}, err
		}
		return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
	}
}

// MemoryMarker is the in-memory SETNX of the design notes, shaped as a
// Deduper: the key is marked in process memory (Redis, in the notes) as
// the work starts, outside the database transaction. A duplicate is told
// AlreadyDone while the first run has not committed, and for good if it
// rolls back.
func MemoryMarker[TTx any]() Deduper[TTx] {
	var marked sync.Map
	return func(ctx context.Context, _ harness.DB[TTx], _ TTx, c DedupeCall, fn func(ctx context.Context) ([]byte, error)) (sqlonce.Result, error) {
		if _, loaded := marked.LoadOrStore(c.Ref, true); loaded {
			return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
		}
		resp, err := fn(ctx)
		if err != nil {
			return sqlonce.Result{}, err
		}
		return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
	}
}

// WorkThenMark is Run done in two transactions, shaped as a Runner: the
// work commits in one, then the key is recorded in another. Two concurrent
// runs both do the work, and a failure between the two commits lets the
// next run do it again.
func WorkThenMark[TTx any]() Runner[TTx] {
	return func(ctx context.Context, db harness.DB[TTx], c DedupeCall, fn func(ctx context.Context, tx TTx) ([]byte, error)) (sqlonce.Result, error) {
		store, err := dedupe.New(db.Driver(), dedupe.WithTTL(keyTTL))
		if err != nil {
			return sqlonce.Result{}, err
		}
		req := dedupe.Request{Scope: c.Scope, Key: c.Key}
		var found bool
		err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			var err error
			found, err = db.Tx(tx).LedgerExistsByRef(ctx, c.Ref)
			return err
		})
		if err != nil || found {
			return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, err
		}
		var resp []byte
		err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			var err error
			resp, err = fn(ctx, tx)
			return err
		})
		if err != nil {
			return sqlonce.Result{}, err
		}
		err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := store.DoResponse(ctx, tx, req, func(context.Context) ([]byte, error) { return resp, nil })
			return err
		})
		if err != nil {
			return sqlonce.Result{}, err
		}
		return sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}, nil
	}
}

// virtualClock is the database "now" the lease workload pins with
// testclock: it starts at the real time and runs speed times faster, so
// that abandoned leases lapse quickly and are taken over without anyone
// sleeping out a real lease.
type virtualClock struct {
	mono   time.Time // monotonic reading of the start
	start  time.Time // wall time of the start, UTC
	speed  int
	mu     sync.Mutex
	frozen time.Time
}

func newVirtualClock(speed int) *virtualClock {
	now := time.Now()
	return &virtualClock{mono: now, start: now.UTC().Truncate(time.Microsecond), speed: speed}
}

// Now returns the pinned time, truncated to the microsecond both databases
// store.
func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen
	}
	return c.start.Add(time.Since(c.mono) * time.Duration(c.speed)).Truncate(time.Microsecond)
}

// Stop freezes the clock where it is.
func (c *virtualClock) Stop() {
	now := c.Now()
	c.mu.Lock()
	c.frozen = now
	c.mu.Unlock()
}

// Advance freezes the clock at t (later than now).
func (c *virtualClock) Advance(t time.Time) {
	c.mu.Lock()
	c.frozen = t.Truncate(time.Microsecond)
	c.mu.Unlock()
}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
