package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// Config shapes a run. Zero fields take the defaults.
type Config[TTx any] struct {
	// DB is the database seen directly: the consumer applies through it,
	// the producers resolve their unknown commits through it, and the
	// checks read it.
	DB harness.DB[TTx]
	// Producers are the views the producers write through, producer i
	// through Producers[i%len]: a fault proxy's (the commits it cuts),
	// one per node of a cluster. Empty: DB.
	Producers []harness.DB[TTx]
	// Proxies are the fault proxies in front of Producers: each cuts one
	// COMMIT now and then (reply lost, or COMMIT lost).
	Proxies []*faultproxy.Proxy
	// Reader reads the tables back for the checks (a handle on DB's
	// database, without sqlonce).
	Reader *sql.DB
	// Relay is how a relay process reaches the database: relay i connects
	// to Relay.DSNs[i%len].
	Relay RelayTarget

	// Keys is how many ordering keys the producers share out (12), each
	// written by one producer at a time, so that its messages' order is
	// the order of their sequence numbers.
	Keys int
	// ProducersN is how many producers run at once (6).
	ProducersN int
	// Messages is how many business transactions the producers run in all
	// (300).
	Messages int
	// RollbackRate is the share of them rolled back on purpose (0.2).
	RollbackRate float64
	// Duration is how long the producers take to run them (5s): the faults
	// are spread over it.
	Duration time.Duration
	// Relays is how many relay processes run at once (3).
	Relays int
	// RelayKills is how many times a relay process is killed with SIGKILL
	// and started again during Duration (4; negative: none). So are
	// BrokerRestarts and Cuts.
	RelayKills int
	// BrokerRestarts is how many times the broker is killed with SIGKILL
	// and started again during Duration (1).
	BrokerRestarts int
	// Cuts is how many COMMITs the proxies are armed to cut (16), half
	// with the reply lost, half with the COMMIT lost.
	Cuts int
	// Enqueue replaces outbox.Store.Enqueue in the producers' transactions:
	// tests swap in a broken producer to show that the checks notice.
	Enqueue func(ctx context.Context, tx TTx, m outbox.Message) (sqlonce.Result, error)
	// NoInbox has the consumer apply every delivery, without the inbox:
	// a test shows that the checks notice the redeliveries applied again.
	NoInbox bool
	// Drain bounds the wait, after Duration, for every committed message
	// to be applied and the outbox to be empty of pending and parked
	// messages (90s).
	Drain time.Duration
}

func (c *Config[TTx]) defaults() {
	if c.Keys <= 0 {
		c.Keys = 12
	}
	if c.ProducersN <= 0 {
		c.ProducersN = 6
	}
	if c.ProducersN > c.Keys {
		c.ProducersN = c.Keys
	}
	if c.Messages <= 0 {
		c.Messages = 300
	}
	if c.RollbackRate == 0 {
		c.RollbackRate = 0.2
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Relays <= 0 {
		c.Relays = 3
	}
	c.RelayKills = orDefault(c.RelayKills, 4)
	c.BrokerRestarts = orDefault(c.BrokerRestarts, 1)
	c.Cuts = orDefault(c.Cuts, 16)
	if c.Drain <= 0 {
		c.Drain = 90 * time.Second
	}
	if len(c.Producers) == 0 {
		c.Producers = []harness.DB[TTx]{c.DB}
	}
}

// brokerDown is how long the broker stays down when it is restarted:
// long enough for the relays' publishes to fail and back off.
const brokerDown = 1500 * time.Millisecond

// orDefault is n, def when n is 0, 0 when n is negative.
func orDefault(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// crashAt are the messages (counted as the consumer applies them) after
// whose commit the consumer acts as one that died before its ack: the
// broker delivers them again, and the inbox must drop them.
var crashAt = [2]int64{40, 120}

// The topic every message goes to, under the broker's subject prefix.
const topic = "orders"

// consumerName is the inbox's consumer.
const consumerName = "outbox-checker"

// How a producer's transaction ended, as the producer saw it.
type ending int

const (
	// rolledBack: rolled back on purpose, after the INSERT and Enqueue.
	rolledBack ending = iota
	// failed: an error before COMMIT (the INSERT or Enqueue failed); the
	// transaction was rolled back.
	failed
	// committed: COMMIT answered.
	committed
	// unknown: COMMIT failed (a cut connection): the producer read the
	// business table to learn whether it committed.
	unknown
)

// attempt is one business transaction of a producer: a row of the
// business table (orders: code = message id, customer = key, amount =
// seq) and the outbox message announcing it.
type attempt struct {
	id, key string
	seq     int64
	end     ending
	// resolved is what the producer read back after an unknown commit.
	resolved bool
	err      error
}

// Report is what a run did and found.
type Report struct {
	Counts     map[string]int
	Violations []string
	Elapsed    time.Duration
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Log writes the counts and up to max violations.
func (r *Report) Log(logf func(string, ...any), max int) {
	names := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "\n  %-44s %d", k, r.Counts[k])
	}
	logf("outbox checker: %v, %d violations%s", r.Elapsed.Round(time.Millisecond), len(r.Violations), b.String())
	for i, v := range r.Violations {
		if i == max {
			logf("... and %d more", len(r.Violations)-max)
			break
		}
		logf("VIOLATION %s", v)
	}
}

// Names of the counts in Report.Counts.
const (
	cAttempts        = "business transactions"
	cCommitted       = "committed (business table)"
	cRolledBack      = "rolled back on purpose"
	cFailed          = "failed before COMMIT (rolled back)"
	cUnknown         = "COMMIT failed: outcome read back"
	cUnknownCommit   = "COMMIT failed: found committed"
	cCutsArmed       = "COMMITs armed to cut"
	cCutReply        = "COMMITs cut: reply lost"
	cCutCommit       = "COMMITs cut: COMMIT lost"
	cRelayKills      = "relay processes killed (SIGKILL)"
	cBrokerRestarts  = "broker restarts (SIGKILL)"
	cPublished       = "published: messages in the stream"
	cDeliveries      = "deliveries to the consumer"
	cApplied         = "applied (inbox FirstRun)"
	cDupsDropped     = "duplicates dropped by the inbox"
	cApplyRetries    = "consumer transactions retried"
	cOutboxSent      = "outbox: sent (not purged)"
	cDrainMillis     = "ms to drain after the producers"
	cBrokerDownFetch = "consumer fetches failed (broker down)"
	cPublishFailures = "publishes failed, retried (outbox attempts)"
	cPublishErrors   = "publishes failed (relay logs)"
	cAcksLost        = "consumer crashes between commit and ack"
	cBrokerDups      = "stream messages beyond one per committed"
)

// run is one run's state.
type run[TTx any] struct {
	t      testing.TB
	cfg    Config[TTx]
	broker broker
	rep    *Report

	mu       sync.Mutex
	attempts []*attempt
	counts   map[string]int

	delivered sync.Map // message id -> *atomic.Int64 (deliveries)
	applied   atomic.Int64
	stop      atomic.Bool
}

func (r *run[TTx]) count(name string, n int) {
	r.mu.Lock()
	r.counts[name] += n
	r.mu.Unlock()
}

// violate records a violation found while the run goes on.
func (r *run[TTx]) violate(format string, args ...any) {
	r.mu.Lock()
	r.rep.violate(format, args...)
	r.mu.Unlock()
}

func (r *run[TTx]) logf(format string, args ...any) {
	r.t.Logf(format, args...)
}

// effectsTable is the consumer's effects: one row per message applied,
// numbered per key (n) in the order the consumer applied them.
const effectsTable = "outbox_ck_effects"

// Run runs the workload: producers, relays (child processes) and the
// consumer, with the faults, then waits for the outbox to drain and
// checks the invariants from the database. It fails t for setup errors
// only; the caller fails it on violations.
func Run[TTx any](t testing.TB, b broker, cfg Config[TTx]) *Report {
	t.Helper()
	cfg.defaults()
	r := &run[TTx]{t: t, cfg: cfg, broker: b, rep: &Report{}, counts: map[string]int{}}
	ctx := context.Background()
	if err := cfg.DB.Exec(ctx, "CREATE TABLE "+effectsTable+" (okey VARCHAR(64) NOT NULL, n BIGINT NOT NULL, msg_id VARCHAR(191) NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (okey, n))"); err != nil {
		t.Fatalf("create %s: %v", effectsTable, err)
	}
	store, err := outbox.New(cfg.DB.Driver())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	relays := newRelays(t, cfg.Relay, b, cfg.Relays)
	defer relays.stopAll()

	consumeCtx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		r.consume(consumeCtx)
	}()
	defer func() { stopConsumer(); <-consumerDone }()

	var wg sync.WaitGroup
	keysOf := make([][]string, cfg.ProducersN)
	for k := range cfg.Keys {
		keysOf[k%cfg.ProducersN] = append(keysOf[k%cfg.ProducersN], fmt.Sprintf("k%02d", k))
	}
	seed := rand.Uint64()
	r.logf("seed %d: %d producers over %d keys, %d transactions in %v (%.0f%% rolled back on purpose), %d relay processes, broker %s",
		seed, cfg.ProducersN, cfg.Keys, cfg.Messages, cfg.Duration, 100*cfg.RollbackRate, cfg.Relays, b.Name())
	for i := range cfg.ProducersN {
		quota := cfg.Messages / cfg.ProducersN
		if i < cfg.Messages%cfg.ProducersN {
			quota++
		}
		wg.Go(func() {
			r.produce(ctx, cfg.Producers[i%len(cfg.Producers)], keysOf[i], quota, rand.New(rand.NewPCG(seed, uint64(i))))
		})
	}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.faults(ctx, relays)
	}()
	wg.Wait()
	<-faultsDone
	produced := time.Now()

	// Every committed message applied, nothing pending or parked.
	want := 0
	for _, a := range r.attempts {
		if a.end == committed || (a.end == unknown && a.resolved) {
			want++
		}
	}
	var st outbox.Stats
	drained := false
	for deadline := time.Now().Add(cfg.Drain); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, err := countApplied(ctx, cfg.Reader)
		if err != nil {
			continue
		}
		st, err = store.Stats(ctx)
		if err != nil {
			continue
		}
		if n >= int64(want) && st.Pending == 0 && st.Parked == 0 {
			drained = true
			break
		}
	}
	r.count(cDrainMillis, int(time.Since(produced).Milliseconds()))
	if !drained {
		r.rep.violate("not drained %v after the producers: %d pending (oldest %v old), %d parked, %d of %d committed messages applied",
			cfg.Drain, st.Pending, st.OldestPendingAge.Round(time.Millisecond), st.Parked, r.applied.Load(), want)
	}
	relays.stopAll()
	stopConsumer()
	<-consumerDone
	r.counts[cRelayKills] = relays.kills
	r.counts[cPublishErrors] = relays.publishErrors()
	for _, line := range relays.failures() {
		r.rep.violate("%s", line)
	}
	r.rep.Elapsed = time.Since(start)
	r.verify(ctx, store)
	r.rep.Counts = r.counts
	return r.rep
}

// produce runs quota business transactions on keys, one key after the
// other, paced to spread them over Duration.
func (r *run[TTx]) produce(ctx context.Context, db harness.DB[TTx], keys []string, quota int, rng *rand.Rand) {
	store, err := outbox.New(db.Driver())
	if err != nil {
		r.t.Error(err)
		return
	}
	enqueue := store.Enqueue
	if r.cfg.Enqueue != nil {
		enqueue = r.cfg.Enqueue
	}
	pace := r.cfg.Duration / time.Duration(max(quota, 1))
	next := map[string]int64{}
	began := time.Now()
	for i := range quota {
		key := keys[i%len(keys)]
		next[key]++
		a := &attempt{id: fmt.Sprintf("%s-%04d", key, next[key]), key: key, seq: next[key]}
		r.transact(ctx, db, enqueue, a, rng.Float64() < r.cfg.RollbackRate)
		r.mu.Lock()
		r.attempts = append(r.attempts, a)
		r.mu.Unlock()
		if d := time.Until(began.Add(pace * time.Duration(i+1))); d > 0 {
			time.Sleep(d)
		}
	}
}

// transact runs a's business transaction: the order row, then the
// message, then COMMIT (or ROLLBACK when rollback). A failed COMMIT is
// resolved from the business table, read through DB.
func (r *run[TTx]) transact(ctx context.Context, db harness.DB[TTx], enqueue func(context.Context, TTx, outbox.Message) (sqlonce.Result, error), a *attempt, rollback bool) {
	tx, err := beginRetry(ctx, db)
	if err != nil {
		a.end, a.err = failed, err
		return
	}
	err = func() error {
		if _, err := db.Tx(tx).OrderInsert(ctx, a.id, a.key, a.seq); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		res, err := enqueue(ctx, tx, outbox.Message{
			ID: a.id, Topic: topic, Key: a.key,
			Payload: []byte(a.key + " " + strconv.FormatInt(a.seq, 10)),
			Headers: map[string]string{"Seq": strconv.FormatInt(a.seq, 10)},
		})
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		if res.Outcome != sqlonce.FirstRun {
			return fmt.Errorf("enqueue of a new message id answered %v", res.Outcome)
		}
		return nil
	}()
	if err != nil || rollback {
		_ = db.Rollback(ctx, tx)
		a.end, a.err = rolledBack, err
		if err != nil {
			a.end = failed
			r.count("failed before COMMIT: "+errClass(err), 1)
		}
		return
	}
	if err := db.Commit(ctx, tx); err != nil {
		a.end, a.err = unknown, err
		a.resolved = r.resolve(ctx, a)
		return
	}
	a.end = committed
}

// resolve reads whether a's order row exists, through DB, until it can
// tell.
func (r *run[TTx]) resolve(ctx context.Context, a *attempt) bool {
	for {
		n, err := r.cfg.DB.Pool().OrderCountByCode(ctx, a.id)
		if err == nil {
			return n > 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// beginRetry begins a transaction, retrying for a while: a connection cut
// at COMMIT leaves the pool a dead one to find.
func beginRetry[TTx any](ctx context.Context, db harness.DB[TTx]) (TTx, error) {
	var err error
	for range 100 {
		var tx TTx
		tx, err = db.Begin(ctx, harness.Default)
		if err == nil {
			return tx, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	var zero TTx
	return zero, err
}

// faults kills relays, restarts the broker and arms the proxies, each
// spread evenly over Duration.
func (r *run[TTx]) faults(ctx context.Context, relays *relays) {
	d := r.cfg.Duration
	type event struct {
		at time.Duration
		do func()
	}
	// Three timelines, each in a goroutine of its own: a broker that takes
	// seconds to start again (RabbitMQ) holds up none of the others.
	var kills, restarts, cuts []event
	for i := range r.cfg.RelayKills {
		kills = append(kills, event{d * time.Duration(i+1) / time.Duration(r.cfg.RelayKills+1), func() {
			if err := relays.killOne(i); err != nil {
				r.violate("relay kill %d: %v", i, err)
			}
		}})
	}
	for i := range r.cfg.BrokerRestarts {
		restarts = append(restarts, event{d * time.Duration(2*i+1) / time.Duration(2*r.cfg.BrokerRestarts), func() {
			began := time.Now()
			if err := r.broker.Restart(ctx, brokerDown); err != nil {
				r.t.Errorf("broker restart: %v", err)
				return
			}
			r.count(cBrokerRestarts, 1)
			r.logf("broker %s killed with SIGKILL and answering again %v later", r.broker.Name(), time.Since(began).Round(time.Millisecond))
		}})
	}
	if len(r.cfg.Proxies) > 0 {
		for i := range r.cfg.Cuts {
			f := faultproxy.LoseReply
			if i%2 == 1 {
				f = faultproxy.LoseCommit
			}
			p := r.cfg.Proxies[i%len(r.cfg.Proxies)]
			cuts = append(cuts, event{d * time.Duration(i+1) / time.Duration(r.cfg.Cuts+1), func() {
				p.ArmNext(f)
				r.count(cCutsArmed, 1)
			}})
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, evs := range [][]event{kills, restarts, cuts} {
		wg.Go(func() {
			for _, ev := range evs {
				time.Sleep(time.Until(start.Add(ev.at)))
				ev.do()
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Until(start.Add(d)))
}

// consume applies what the broker delivers, one message at a time, in
// the order of delivery: inbox.HandleTx and the effect row in one
// transaction, retried until it commits, then the ack.
func (r *run[TTx]) consume(ctx context.Context) {
	db := r.cfg.DB
	in, err := inbox.New(db.Driver(), consumerName)
	if err != nil {
		r.t.Error(err)
		return
	}
	err = r.broker.Consume(ctx, func(ctx context.Context, d delivery) error {
		r.count(cDeliveries, 1)
		if !safeID(d.ID) || !safeID(d.Key) {
			r.violate("a delivery that is none of the workload's messages: id %q, key %q", d.ID, d.Key)
			return nil
		}
		c, _ := r.delivered.LoadOrStore(d.ID, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		for tries := 0; ; tries++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if tries > 0 {
				r.count(cApplyRetries, 1)
				time.Sleep(20 * time.Millisecond)
			}
			tx, err := db.Begin(ctx, harness.Default)
			if err != nil {
				continue
			}
			write := func(ctx context.Context) error {
				return db.TxExec(ctx, tx, fmt.Sprintf(
					"INSERT INTO %s (okey, n, msg_id, seq) SELECT '%s', COALESCE(MAX(n), 0) + 1, '%s', %d FROM %s WHERE okey = '%s'",
					effectsTable, d.Key, d.ID, d.Seq, effectsTable, d.Key))
			}
			var res sqlonce.Result
			if r.cfg.NoInbox {
				res.Outcome, err = sqlonce.FirstRun, write(ctx)
			} else {
				res, err = in.HandleTx(ctx, tx, d.ID, write)
			}
			if err != nil {
				_ = db.Rollback(ctx, tx)
				continue
			}
			if err := db.Commit(ctx, tx); err != nil {
				continue // an unknown commit: the inbox tells on the next try
			}
			if res.AlreadyDone() {
				r.count(cDupsDropped, 1)
				return nil
			}
			r.count(cApplied, 1)
			if n := r.applied.Add(1); n == crashAt[0] || n == crashAt[1] {
				r.count(cAcksLost, 1)
				return errCrash
			}
			return nil
		}
	})
	if err != nil && ctx.Err() == nil {
		r.t.Errorf("consumer: %v", err)
	}
}

// safeID reports whether s is made of the characters the workload's ids
// and keys use, so that it can be written into a statement's text.
func safeID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// errClass is a short name for an error's kind, for the counts.
func errClass(err error) string {
	kind := "not retryable"
	if sqlonce.IsRetryable(err) {
		kind = "retryable"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i > 12 {
		s = s[i+2:]
	}
	if len(s) > 50 {
		s = s[:50]
	}
	return kind + ", " + s
}

// countApplied counts the effects of committed messages.
func countApplied(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+effectsTable+" e JOIN orders o ON o.code = e.msg_id").Scan(&n)
	return n, err
}
