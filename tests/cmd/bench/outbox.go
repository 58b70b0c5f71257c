package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
)

// The outbox comparison's flags, registered here so that main.go needs
// one line for it.
var (
	outboxFlag     = flag.Bool("outbox", false, "run the outbox comparison instead: outbox.Enqueue (on PostgreSQL also WithoutNotify) and watermill-sql's forwarder publisher in the business transaction against the bare one, then relay throughput and COMMIT-to-broker-ack latency with 1 and 4 relays, sqlonce's Relay against watermill's forwarder, to NATS JetStream, on each -db")
	outboxNATS     = flag.String("outbox-nats", "", "with -outbox: a NATS server with JetStream; empty starts nats-server as a child on a free loopback port")
	outboxMessages = flag.Int("outbox-messages", DefaultOutboxConfig().Messages, "with -outbox: messages in the backlog each relay variant drains per round (throughput)")
	outboxRate     = flag.Int("outbox-rate", DefaultOutboxConfig().Rate, "with -outbox: messages per second the producers commit while the relays run (latency)")
	outboxFor      = flag.Duration("outbox-for", DefaultOutboxConfig().LatencyRun, "with -outbox: how long the producers commit at -outbox-rate per round (latency)")
	outboxKeys     = flag.Int("outbox-keys", DefaultOutboxConfig().Keys, "with -outbox: ordering keys the messages are spread over (message i has key i mod this)")
	outboxPoll     = flag.Duration("outbox-poll", DefaultOutboxConfig().Poll, "with -outbox: poll interval of both sqlonce's relay and watermill's SQL subscriber")
)

// OutboxConfig is one run of the outbox comparison.
type OutboxConfig struct {
	Databases   []string
	PostgresDSN string
	MySQLDSN    string
	// NATSURL is a NATS server with JetStream; "" starts a nats-server
	// child for the run.
	NATSURL string
	// Clients is how many transactions run at once in the Enqueue timing
	// and how many producers commit at once in the relay runs.
	Clients int
	// Rounds of interleaved runs; each runs every variant once, in a
	// shuffled order. Medians over rounds are reported.
	Rounds int
	// Duration of one Enqueue variant's timed run per round.
	Duration time.Duration
	// Warmup is each Enqueue variant's untimed run before round 1.
	Warmup time.Duration
	// Messages is the backlog a relay variant drains per round.
	Messages int
	// Rate and LatencyRun: the producers commit Rate messages a second
	// for LatencyRun while the relays run.
	Rate       int
	LatencyRun time.Duration
	// Keys is how many ordering keys the messages are spread over.
	Keys int
	// Poll is both relays' poll interval.
	Poll time.Duration
	// Relays are the relay counts compared (1 and 4).
	Relays []int
	// Counted is how many transactions of each kind are counted on the
	// wire for round trips.
	Counted int
	// AckTimeout bounds the wait for a run's messages to be acknowledged.
	AckTimeout time.Duration
	Seed       uint64
	Progress   io.Writer
}

// DefaultOutboxConfig is a modest run: the machine the figures come from
// has two cores that other work shares.
func DefaultOutboxConfig() OutboxConfig {
	return OutboxConfig{
		Databases:   []string{"postgres", "mysql"},
		PostgresDSN: LocalPostgres,
		MySQLDSN:    LocalMySQL,
		Clients:     8,
		Rounds:      3,
		Duration:    400 * time.Millisecond,
		Warmup:      200 * time.Millisecond,
		Messages:    1000,
		Rate:        200,
		LatencyRun:  2 * time.Second,
		Keys:        256,
		Poll:        100 * time.Millisecond,
		Relays:      []int{1, 4},
		Counted:     10,
		AckTimeout:  2 * time.Minute,
		Seed:        1,
	}
}

func (c OutboxConfig) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

func (c OutboxConfig) check() error {
	switch {
	case c.Clients < 1 || c.Rounds < 1 || c.Duration <= 0:
		return errors.New("outbox: clients, rounds and duration must be positive")
	case c.Messages < 1 || c.Rate < 1 || c.LatencyRun <= 0 || c.Keys < 1 || c.Poll < time.Millisecond:
		return errors.New("outbox: messages, rate, keys and the latency run must be positive, the poll at least 1ms")
	case len(c.Relays) == 0 || c.Counted < 1 || c.AckTimeout <= 0:
		return errors.New("outbox: no relay count, counted transactions or ack timeout")
	case len(c.Databases) == 0:
		return errors.New("outbox: no database to run on")
	}
	for _, d := range c.Databases {
		if d != "postgres" && d != "mysql" {
			return fmt.Errorf("unknown database %q (postgres, mysql)", d)
		}
	}
	return nil
}

// OutboxReport is everything one outbox run measured.
type OutboxReport struct {
	Started   time.Time        `json:"started"`
	Seconds   float64          `json:"seconds"`
	Command   string           `json:"command"`
	Machine   Machine          `json:"machine"`
	Settings  OutboxConfigJSON `json:"settings"`
	NATS      string           `json:"nats"`
	Databases []OutboxDBReport `json:"databases"`
}

// OutboxConfigJSON is the part of OutboxConfig that shapes the numbers.
type OutboxConfigJSON struct {
	Clients    int     `json:"clients"`
	Rounds     int     `json:"rounds"`
	DurationMs float64 `json:"duration_ms"`
	Messages   int     `json:"messages"`
	Rate       int     `json:"rate"`
	LatencyRun float64 `json:"latency_run_s"`
	Keys       int     `json:"keys"`
	PollMs     float64 `json:"poll_ms"`
	Relays     []int   `json:"relays"`
}

// OutboxDBReport is one database's results.
type OutboxDBReport struct {
	Database string          `json:"database"`
	Server   Server          `json:"server"`
	CPU      CPUUse          `json:"cpu"`
	Enqueue  []EnqueueResult `json:"enqueue"`
	Relay    []RelayResult   `json:"relay"`
}

// EnqueueResult is one way of writing a message in the business
// transaction, against the bare transaction.
type EnqueueResult struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Medians over rounds.
	TPS   float64 `json:"tps"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// Ratio is the median over rounds of the bare transaction's
	// throughput divided by this one's in the same round; Min and Max
	// the extreme rounds.
	Ratio    float64 `json:"x_bare"`
	RatioMin float64 `json:"x_bare_min"`
	RatioMax float64 `json:"x_bare_max"`
	Ops      int64   `json:"ops"`
	// RoundTrips and Statements per transaction (BEGIN and COMMIT
	// included), counted on the wire.
	RoundTrips float64 `json:"round_trips"`
	Statements float64 `json:"statements"`
}

// RelayResult is one relay variant: a peer with a number of relays.
type RelayResult struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Relays int    `json:"relays"`
	// MsgPerSec is the median over rounds of a backlog drained: messages
	// acknowledged by the broker per second, from the relays' start to
	// the last ack.
	MsgPerSec    float64   `json:"msg_per_s"`
	MsgPerSecMin float64   `json:"msg_per_s_min"`
	MsgPerSecMax float64   `json:"msg_per_s_max"`
	RoundRates   []float64 `json:"round_msg_per_s"`
	// P50Ms and P99Ms: from the producer sending COMMIT to the broker's
	// publish ack, while producers commit at the configured rate; median
	// over rounds.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// RateAchieved is the producers' actual rate in the latency runs;
	// ProducerP99Ms the producers' transactions' p99 meanwhile.
	RateAchieved  float64 `json:"rate_achieved"`
	ProducerP99Ms float64 `json:"producer_tx_p99_ms"`
	// Enqueued messages committed over all rounds; InStream how many of
	// them the stream holds (distinct Nats-Msg-Id); Lost the others;
	// StreamDuplicates messages stored twice; PublishedAgain publishes of
	// a message the broker had acknowledged already.
	Enqueued         int `json:"enqueued"`
	InStream         int `json:"in_stream"`
	Lost             int `json:"lost"`
	StreamDuplicates int `json:"stream_duplicates"`
	PublishedAgain   int `json:"published_again"`
}

// mainOutbox is main for -outbox.
func mainOutbox(ctx context.Context, cfg Config, jsPath string) int {
	if cfg.Latency > 0 || len(cfg.Only) > 0 {
		fmt.Fprintln(os.Stderr, "bench: -outbox takes neither -latency nor -only")
		return 2
	}
	oc := DefaultOutboxConfig()
	oc.Databases, oc.PostgresDSN, oc.MySQLDSN = cfg.Databases, cfg.PostgresDSN, cfg.MySQLDSN
	oc.Clients, oc.Rounds, oc.Duration, oc.Warmup, oc.Seed, oc.Progress = cfg.Clients, cfg.Rounds, cfg.Duration, cfg.Warmup, cfg.Seed, cfg.Progress
	oc.NATSURL, oc.Messages, oc.Rate, oc.LatencyRun, oc.Keys, oc.Poll = *outboxNATS, *outboxMessages, *outboxRate, *outboxFor, *outboxKeys, *outboxPoll
	if !flagSet("rounds") {
		oc.Rounds = DefaultOutboxConfig().Rounds
	}
	rep, err := RunOutbox(ctx, oc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	rep.Command = strings.TrimSpace("go run ./cmd/bench " + strings.Join(os.Args[1:], " "))
	_ = WriteOutboxTable(os.Stdout, rep)
	if jsPath != "" {
		f, err := os.Create(jsPath)
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
			return 1
		}
	}
	return 0
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// RunOutbox runs the outbox comparison on every configured database.
func RunOutbox(ctx context.Context, cfg OutboxConfig) (*OutboxReport, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rep := &OutboxReport{
		Started: time.Now().UTC(),
		Machine: describeMachine(),
		Settings: OutboxConfigJSON{Clients: cfg.Clients, Rounds: cfg.Rounds, DurationMs: ms(cfg.Duration),
			Messages: cfg.Messages, Rate: cfg.Rate, LatencyRun: cfg.LatencyRun.Seconds(), Keys: cfg.Keys,
			PollMs: ms(cfg.Poll), Relays: cfg.Relays},
	}
	url := cfg.NATSURL
	if url == "" {
		u, stop, err := startNATS(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		url = u
	}
	run := uniqueName("")
	for _, d := range cfg.Databases {
		var (
			dr  OutboxDBReport
			err error
		)
		switch d {
		case "postgres":
			dr, err = outboxWith(ctx, cfg, url, run, func(n int) (*pgBackend, error) { return openPostgres(ctx, cfg.PostgresDSN, n) }, cfg.PostgresDSN)
		case "mysql":
			dr, err = outboxWith(ctx, cfg, url, run, func(n int) (*myBackend, error) { return openMySQL(ctx, cfg.MySQLDSN, n) }, cfg.MySQLDSN)
		}
		if err != nil {
			return rep, fmt.Errorf("%s: %w", d, err)
		}
		rep.NATS = dr.Server.Settings["nats"]
		delete(dr.Server.Settings, "nats")
		rep.Databases = append(rep.Databases, dr)
	}
	rep.Machine.LoadAfter = loadAvg()
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// outboxWith runs both phases on one database: the Enqueue timing in a
// schema (database) of its own, then the relays in another, so that the
// first leaves no backlog for the second.
func outboxWith[TTx any, B backend[TTx]](ctx context.Context, cfg OutboxConfig, url, run string, open func(poolSize int) (B, error), server string) (OutboxDBReport, error) {
	var dr OutboxDBReport
	a, err := open(2*cfg.Clients + 4)
	if err != nil {
		return dr, err
	}
	cpu0 := sampleCPU()
	err = func() error {
		defer a.close()
		var err error
		if dr.Server, err = a.server(ctx); err != nil {
			return err
		}
		dr.Database = a.name()
		if dr.Enqueue, err = enqueuePhase[TTx](ctx, cfg, a, server); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		return nil
	}()
	if err != nil {
		return dr, err
	}
	// The relays' phase: producers, up to 4 relays or forwarders with a
	// connection each (and sqlonce's listener on PostgreSQL), the checks.
	b, err := open(cfg.Clients + 4*slices.Max(cfg.Relays) + 4)
	if err != nil {
		return dr, err
	}
	defer b.close()
	var nv string
	if dr.Relay, nv, err = relayPhase[TTx](ctx, cfg, b, url, run); err != nil {
		return dr, fmt.Errorf("relay: %w", err)
	}
	dr.Server.Settings["nats"] = nv
	dr.CPU = cpuUse(cpu0, sampleCPU())
	return dr, nil
}

// A message's payload: about 100 bytes of JSON, as an "order placed"
// event might be.
func payload(id, key string) []byte {
	return fmt.Appendf(nil, `{"event":"order.placed","order":%q,"customer":%q,"amount":100,"currency":"EUR"}`, id, key)
}

// producer writes one message in tx beside the business INSERT.
type producer[TTx any] func(ctx context.Context, tx TTx, id, key string) error

func sqlonceProducer[TTx any](e *obEnv[TTx], topic string) producer[TTx] {
	return storeProducer(e.store, topic)
}

// storeProducer enqueues through s: e.store, or e.quiet.
func storeProducer[TTx any](s *outbox.Store[TTx], topic string) producer[TTx] {
	return func(ctx context.Context, tx TTx, id, key string) error {
		res, err := s.Enqueue(ctx, tx, outbox.Message{ID: id, Topic: topic, Key: key, Payload: payload(id, key)})
		if err == nil && res.Outcome != sqlonce.FirstRun {
			err = fmt.Errorf("enqueue %s: outcome %v, want a first run", id, res.Outcome)
		}
		return err
	}
}

// watermillProducer publishes through watermill-sql's Publisher on the
// caller's transaction, wrapped by the forwarder's Publisher (the
// envelope naming the destination topic), as watermill's forwarder
// documentation sets it up.
func watermillProducer[TTx any](e *obEnv[TTx], forwarderTopic, topic string) producer[TTx] {
	return func(ctx context.Context, tx TTx, id, key string) error {
		sp, err := wmsql.NewPublisher(e.wmExec(tx), wmsql.PublisherConfig{SchemaAdapter: e.wmSchema}, nil)
		if err != nil {
			return err
		}
		p := forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
		m := message.NewMessage(id, payload(id, key))
		m.Metadata.Set("key", key)
		m.SetContext(ctx)
		return p.Publish(topic, m)
	}
}

// transact runs one business transaction: the ledger INSERT and, unless
// produce is nil, the message. committing is called just before COMMIT
// is sent. A retryable failure is retried with the same id.
func transact[TTx any](ctx context.Context, e *obEnv[TTx], produce producer[TTx], id, key string, committing func()) error {
	for attempt := 1; ; attempt++ {
		err := func() error {
			tx, err := e.begin(ctx)
			if err != nil {
				return err
			}
			if err := e.ledger(ctx, tx, id); err != nil {
				_ = e.rollback(ctx, tx)
				return err
			}
			if produce != nil {
				if err := produce(ctx, tx, id, key); err != nil {
					_ = e.rollback(ctx, tx)
					return err
				}
			}
			if committing != nil {
				committing()
			}
			return e.commit(ctx, tx)
		}()
		if err == nil || attempt >= 10 || !retryable(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
}

// enqueuePhase times the bare transaction, with outbox.Enqueue, and with
// watermill-sql's forwarder publisher, in interleaved rounds, then counts
// each one's round trips on the wire.
func enqueuePhase[TTx any](ctx context.Context, cfg OutboxConfig, b backend[TTx], server string) ([]EnqueueResult, error) {
	e, err := outboxEnvOf(b)
	if err != nil {
		return nil, err
	}
	const fwdTopic = "bench_enqueue"
	if err := wmInit(e, fwdTopic); err != nil {
		return nil, err
	}
	type variant struct {
		id, name string
		p        producer[TTx]
	}
	vs := []variant{
		{"bare", "bare INSERT (1.00)", nil},
		{"sqlonce", "INSERT + outbox.Enqueue", sqlonceProducer(e, "bench.enqueue")},
		{"watermill", "INSERT + watermill-sql forwarder Publish", watermillProducer(e, fwdTopic, "bench.enqueue")},
	}
	if e.quiet != nil {
		vs = append(vs, variant{"sqlonce-nonotify", "INSERT + outbox.Enqueue, WithoutNotify", storeProducer(e.quiet, "bench.enqueue")})
	}
	seq := 0
	runOne := func(v variant, d time.Duration) (roundResult, error) {
		seq++
		prefix := fmt.Sprintf("e%d%s", seq, v.id)
		var (
			mu   sync.Mutex
			lat  []time.Duration
			ferr error
			wg   sync.WaitGroup
			next int
		)
		start := time.Now()
		deadline := start.Add(d)
		for range cfg.Clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					id := fmt.Sprintf("%s-%d", prefix, i)
					t0 := time.Now()
					if err := transact(ctx, e, v.p, id, fmt.Sprintf("k%d", i%cfg.Keys), nil); err != nil {
						mu.Lock()
						ferr = cmpErr(ferr, fmt.Errorf("%s: %w", v.id, err))
						mu.Unlock()
						return
					}
					dt := time.Since(t0)
					mu.Lock()
					lat = append(lat, dt)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		if ferr != nil {
			return roundResult{}, ferr
		}
		slices.Sort(lat)
		return roundResult{tps: float64(len(lat)) / elapsed.Seconds(), p50: percentile(lat, .5), p99: percentile(lat, .99), ops: int64(len(lat))}, nil
	}
	if cfg.Warmup > 0 {
		cfg.logf("%s: outbox enqueue: warm-up", b.name())
		for _, v := range vs {
			if _, err := runOne(v, cfg.Warmup); err != nil {
				return nil, err
			}
		}
	}
	rounds := make([][]roundResult, len(vs))
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for r := range cfg.Rounds {
		cfg.logf("%s: outbox enqueue: round %d/%d", b.name(), r+1, cfg.Rounds)
		for _, i := range rng.Perm(len(vs)) {
			rr, err := runOne(vs[i], cfg.Duration)
			if err != nil {
				return nil, err
			}
			rounds[i] = append(rounds[i], rr)
		}
	}
	out := make([]EnqueueResult, len(vs))
	for i, v := range vs {
		res := EnqueueResult{ID: v.id, Name: v.name}
		var tps, p50, p99, ratio []float64
		for r, rr := range rounds[i] {
			tps, p50, p99 = append(tps, rr.tps), append(p50, rr.p50), append(p99, rr.p99)
			ratio = append(ratio, rounds[0][r].tps/rr.tps)
			res.Ops += rr.ops
		}
		res.TPS, res.P50Ms, res.P99Ms = median(tps), median(p50), median(p99)
		res.Ratio, res.RatioMin, res.RatioMax = median(ratio), slices.Min(ratio), slices.Max(ratio)
		out[i] = res
	}

	// Round trips: the same transactions on one connection through a
	// counting proxy, after a few to fill the statement caches.
	ce, err := countedEnvOf(ctx, b, server)
	if err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	defer ce.close()
	cvs := []producer[TTx]{nil, sqlonceProducer(ce, "bench.enqueue"), watermillProducer(ce, fwdTopic, "bench.enqueue")}
	if ce.quiet != nil {
		cvs = append(cvs, storeProducer(ce.quiet, "bench.enqueue"))
	}
	for i, p := range cvs {
		for j := range 3 + cfg.Counted {
			if j == 3 {
				ce.reset()
			}
			if err := transact(ctx, ce, p, fmt.Sprintf("c%d-%d", i, j), "k0", nil); err != nil {
				return nil, fmt.Errorf("round trips %s: %w", vs[i].id, err)
			}
		}
		c := ce.counts()
		out[i].RoundTrips = float64(c.RoundTrips) / float64(cfg.Counted)
		out[i].Statements = float64(c.Statements) / float64(cfg.Counted)
	}
	return out, nil
}

func cmpErr(old, err error) error {
	if old != nil {
		return old
	}
	return err
}

// wmInit creates a forwarder topic's tables, as the subscriber's
// InitializeSchema would.
func wmInit[TTx any](e *obEnv[TTx], topic string) error {
	sub, err := wmsql.NewSubscriber(e.wmBeginner, wmsql.SubscriberConfig{SchemaAdapter: e.wmSchema, OffsetsAdapter: e.wmOffsets}, nil)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		return fmt.Errorf("watermill schema for %s: %w", topic, err)
	}
	return nil
}

// relayVariant is one peer with a number of relays, with what it
// published over the rounds.
type relayVariant struct {
	id, name  string
	relays    int
	watermill bool
	subject   string // NATS subject, also the topic
	fwdTopic  string // watermill's SQL topic
	acks      *ackLog
	enqueued  []string
	// per round
	rates, p50, p99, achieved, prodP99 []float64
}

// relayPhase measures the relays: per round and variant, a backlog
// drained (throughput), then producers at a steady rate (latency). It
// returns the results and the NATS server's version.
func relayPhase[TTx any](ctx context.Context, cfg OutboxConfig, b backend[TTx], url, run string) ([]RelayResult, string, error) {
	e, err := outboxEnvOf(b)
	if err != nil {
		return nil, "", err
	}
	nc, err := nats.Connect(url, nats.Name("sqlonce-bench sqlonce"))
	if err != nil {
		return nil, "", err
	}
	defer nc.Close()
	wnc, err := nats.Connect(url, nats.Name("sqlonce-bench watermill"))
	if err != nil {
		return nil, "", err
	}
	defer wnc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, "", err
	}
	prefix := "sqlonce-bench." + run + "." + b.name()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "SQLONCE_BENCH_" + run + "_" + strings.ToUpper(b.name()), Subjects: []string{prefix + ".>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, "", fmt.Errorf("create stream: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, stream.CachedInfo().Config.Name)
	}()
	sqlPub, err := natsjs.New(js)
	if err != nil {
		return nil, "", err
	}
	wmPub, err := wmnats.NewPublisherWithNatsConn(wnc, wmnats.PublisherPublishConfig{
		Marshaler: &wmnats.NATSMarshaler{}, SubjectCalculator: wmnats.DefaultSubjectCalculator,
		JetStream: wmnats.JetStreamConfig{TrackMsgId: true},
	}, watermill.NopLogger{})
	if err != nil {
		return nil, "", err
	}

	var vs []*relayVariant
	for _, n := range cfg.Relays {
		vs = append(vs, &relayVariant{id: fmt.Sprintf("sqlonce-%d", n), name: fmt.Sprintf("sqlonce Relay x%d", n), relays: n,
			subject: fmt.Sprintf("%s.sqlonce-%d", prefix, n), acks: newAckLog()})
	}
	for _, n := range cfg.Relays {
		v := &relayVariant{id: fmt.Sprintf("watermill-%d", n), name: fmt.Sprintf("watermill forwarder x%d", n), relays: n, watermill: true,
			subject: fmt.Sprintf("%s.watermill-%d", prefix, n), fwdTopic: fmt.Sprintf("bench_fwd_%d", n), acks: newAckLog()}
		if err := wmInit(e, v.fwdTopic); err != nil {
			return nil, "", err
		}
		vs = append(vs, v)
	}
	seq := 0
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	for r := range cfg.Rounds {
		for _, i := range rng.Perm(len(vs)) {
			v := vs[i]
			cfg.logf("%s: outbox relay: round %d/%d, %s", b.name(), r+1, cfg.Rounds, v.id)
			var produce producer[TTx]
			if v.watermill {
				produce = watermillProducer(e, v.fwdTopic, v.subject)
			} else {
				produce = sqlonceProducer(e, v.subject)
			}
			start := func() (func() error, error) {
				if v.watermill {
					return startForwarders(ctx, e, v, &ackPublisher{wmPub, v.acks}, cfg.Poll)
				}
				return startRelays(ctx, e, v, sqlPub, cfg.Poll)
			}
			// Throughput: a backlog committed with no relay running, then
			// drained.
			seq++
			ids, _, _, err := produceMessages(ctx, cfg, e, produce, fmt.Sprintf("%s-%s-d%d", run, v.id, seq), cfg.Messages, 0)
			v.enqueued = append(v.enqueued, ids...)
			if err != nil {
				return nil, "", err
			}
			t0 := time.Now()
			stop, err := start()
			if err != nil {
				return nil, "", err
			}
			err = delivered(ctx, cfg, e, v, ids)
			if serr := stop(); err == nil {
				err = serr
			}
			if err != nil {
				return nil, "", fmt.Errorf("%s, drain: %w", v.id, err)
			}
			acked, lastAck := 0, t0
			for _, id := range ids {
				if at, ok := v.acks.at(id); ok {
					acked++
					if at.After(lastAck) {
						lastAck = at
					}
				}
			}
			if acked > 0 {
				v.rates = append(v.rates, float64(acked)/lastAck.Sub(t0).Seconds())
			}

			// Latency: the relays run, the producers commit at the rate.
			if stop, err = start(); err != nil {
				return nil, "", err
			}
			seq++
			n := max(1, int(float64(cfg.Rate)*cfg.LatencyRun.Seconds()))
			ids, commitAt, txLat, err := produceMessages(ctx, cfg, e, produce, fmt.Sprintf("%s-%s-l%d", run, v.id, seq), n, cfg.Rate)
			v.enqueued = append(v.enqueued, ids...)
			if err == nil {
				err = delivered(ctx, cfg, e, v, ids)
			}
			if serr := stop(); err == nil {
				err = serr
			}
			if err != nil {
				return nil, "", fmt.Errorf("%s, latency: %w", v.id, err)
			}
			lat := make([]time.Duration, 0, len(ids))
			var first, last time.Time
			for j, id := range ids {
				at, ok := v.acks.at(id)
				if !ok {
					continue // lost: counted from the stream below
				}
				lat = append(lat, at.Sub(commitAt[j]))
				if first.IsZero() || commitAt[j].Before(first) {
					first = commitAt[j]
				}
				if commitAt[j].After(last) {
					last = commitAt[j]
				}
			}
			slices.Sort(lat)
			slices.Sort(txLat)
			v.p50, v.p99 = append(v.p50, percentile(lat, .5)), append(v.p99, percentile(lat, .99))
			v.prodP99 = append(v.prodP99, percentile(txLat, .99))
			if len(ids) > 1 && last.After(first) {
				v.achieved = append(v.achieved, float64(len(ids)-1)/last.Sub(first).Seconds())
			}
		}
	}

	// What reached the broker, read back from the stream.
	out := make([]RelayResult, 0, len(vs))
	for _, v := range vs {
		got, err := streamIDs(ctx, stream, v.subject)
		if err != nil {
			return nil, "", fmt.Errorf("%s: read the stream: %w", v.id, err)
		}
		res := RelayResult{ID: v.id, Name: v.name, Relays: v.relays, RoundRates: v.rates, MsgPerSec: median(v.rates),
			P50Ms: median(v.p50), P99Ms: median(v.p99), RateAchieved: median(v.achieved), ProducerP99Ms: median(v.prodP99),
			Enqueued: len(v.enqueued), PublishedAgain: v.acks.repeats()}
		if len(v.rates) > 0 {
			res.MsgPerSecMin, res.MsgPerSecMax = slices.Min(v.rates), slices.Max(v.rates)
		}
		for _, id := range v.enqueued {
			if k := got[id]; k > 0 {
				res.InStream++
				res.StreamDuplicates += k - 1
			} else {
				res.Lost++
			}
		}
		out = append(out, res)
	}
	return out, nc.ConnectedServerVersion(), nil
}

// produceMessages commits n messages, cfg.Clients transactions at a
// time: as fast as they go for rate 0, else the i-th not before i/rate
// seconds from the start. It returns the ids, when each COMMIT was sent,
// and the transactions' durations.
func produceMessages[TTx any](ctx context.Context, cfg OutboxConfig, e *obEnv[TTx], produce producer[TTx], prefix string, n, rate int) ([]string, []time.Time, []time.Duration, error) {
	ids := make([]string, n)
	commitAt := make([]time.Time, n)
	txLat := make([]time.Duration, n)
	work := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("%s-%d", prefix, i)
				t0 := time.Now()
				err := transact(ctx, e, produce, id, fmt.Sprintf("k%d", i%cfg.Keys), func() { commitAt[i] = time.Now() })
				txLat[i] = time.Since(t0)
				if err != nil {
					mu.Lock()
					ferr = cmpErr(ferr, err)
					mu.Unlock()
					continue
				}
				ids[i] = id
			}
		}()
	}
	start := time.Now()
	for i := range n {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if ferr != nil {
		return slices.DeleteFunc(ids, func(s string) bool { return s == "" }), nil, nil, ferr
	}
	return ids, commitAt, txLat, nil
}

// delivered waits until the broker acknowledged every one of ids, or
// the peer's own records say it has nothing left to publish and no ack
// came for a while (the missing messages are lost: the stream count
// says so), and then until the peer recorded its publishes (settle).
// It fails only when neither happens within cfg.AckTimeout.
func delivered[TTx any](ctx context.Context, cfg OutboxConfig, e *obEnv[TTx], v *relayVariant, ids []string) error {
	deadline := time.Now().Add(cfg.AckTimeout)
	grace := time.Second + 10*cfg.Poll
	var idleSince time.Time
	lastAcks := -1
	for {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := v.acks.wait(wctx, ids)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return err
		}
		n, err := backlog(ctx, e, v)
		if err != nil {
			return err
		}
		acks := v.acks.count()
		if n > 0 || acks != lastAcks {
			idleSince, lastAcks = time.Time{}, acks
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		} else if time.Since(idleSince) > grace {
			cfg.logf("%s: %s: nothing left to publish by its own records, messages not acknowledged: lost", e.name, v.id)
			break
		}
	}
	return settle(ctx, cfg, e, v)
}

// backlog is what the peer's own records still have to publish.
func backlog[TTx any](ctx context.Context, e *obEnv[TTx], v *relayVariant) (int64, error) {
	if v.watermill {
		return e.wmBacklog(ctx, v.fwdTopic)
	}
	st, err := e.store.Stats(ctx)
	return st.Pending, err
}

// settle waits, after the broker acknowledged everything, until the peer
// recorded it in the database too (sqlonce: nothing pending; watermill:
// its consumer group's offset past every row), so that the next run
// starts from a clean outbox and a stopped relay leaves nothing to
// publish again.
func settle[TTx any](ctx context.Context, cfg OutboxConfig, e *obEnv[TTx], v *relayVariant) error {
	deadline := time.Now().Add(cfg.AckTimeout)
	for {
		n, err := backlog(ctx, e, v)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages still not recorded as published", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startRelays starts v.relays sqlonce relays publishing through pub; stop
// ends them and waits.
func startRelays[TTx any](ctx context.Context, e *obEnv[TTx], v *relayVariant, pub *natsjs.Publisher, poll time.Duration) (func() error, error) {
	rctx, cancel := context.WithCancel(ctx)
	p := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		err := pub.Publish(ctx, m)
		if err == nil {
			v.acks.ack(m.ID)
		}
		return err
	})
	errs := make(chan error, v.relays)
	for range v.relays {
		go func() { errs <- e.store.Relay(rctx, p, outbox.WithPollInterval(poll)) }()
	}
	return func() error {
		cancel()
		var first error
		for range v.relays {
			if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
				first = cmpErr(first, err)
			}
		}
		return first
	}, nil
}

// ackPublisher is watermill's NATS publisher, recording the broker's acks.
type ackPublisher struct {
	p    message.Publisher
	acks *ackLog
}

func (a *ackPublisher) Publish(topic string, ms ...*message.Message) error {
	err := a.p.Publish(topic, ms...)
	if err == nil {
		for _, m := range ms {
			a.acks.ack(m.UUID)
		}
	}
	return err
}

// Close leaves the shared connection open.
func (a *ackPublisher) Close() error { return nil }

// startForwarders starts v.relays watermill forwarders, each with a SQL
// subscriber of its own in the default consumer group; stop closes them.
func startForwarders[TTx any](ctx context.Context, e *obEnv[TTx], v *relayVariant, pub message.Publisher, poll time.Duration) (func() error, error) {
	type fw struct {
		f    *forwarder.Forwarder
		s    *wmsql.Subscriber
		done chan error
	}
	var fws []fw
	stop := func() error {
		var first error
		for _, f := range fws {
			first = cmpErr(first, f.f.Close())
			first = cmpErr(first, f.s.Close())
			if err := <-f.done; err != nil && !errors.Is(err, context.Canceled) {
				first = cmpErr(first, err)
			}
		}
		return first
	}
	for range v.relays {
		sub, err := wmsql.NewSubscriber(e.wmBeginner, wmsql.SubscriberConfig{
			SchemaAdapter: e.wmSchema, OffsetsAdapter: e.wmOffsets, PollInterval: poll,
		}, nil)
		if err != nil {
			_ = stop()
			return nil, err
		}
		f, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: v.fwdTopic, CloseTimeout: 30 * time.Second})
		if err != nil {
			_ = sub.Close()
			_ = stop()
			return nil, err
		}
		x := fw{f, sub, make(chan error, 1)}
		go func() { x.done <- f.Run(ctx) }()
		fws = append(fws, x)
		select {
		case <-f.Running():
		case err := <-x.done:
			x.done <- err
			_ = stop()
			return nil, fmt.Errorf("watermill forwarder: %w", err)
		}
	}
	return stop, nil
}

// WriteOutboxTable writes the outbox report for people.
func WriteOutboxTable(w io.Writer, rep *OutboxReport) error {
	m, s := rep.Machine, rep.Settings
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("sqlonce outbox benchmark, %s (%.0f s)", rep.Started.Format("2006-01-02 15:04 MST"), rep.Seconds)
	if rep.Command != "" {
		p("command:  %s", rep.Command)
	}
	p("machine:  %s, %d CPUs (GOMAXPROCS %d), %.1f GiB, %s, kernel %s, %s", m.CPU, m.CPUs, m.GOMAXPROCS, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	p("load:     %s at start, %s at end (1/5/15 min)", m.LoadBefore, m.LoadAfter)
	p("broker:   NATS %s, JetStream, file storage", rep.NATS)
	p("enqueue:  %d clients, %d rounds of %v per variant, shuffled per round; medians; round trips counted on one connection", s.Clients, s.Rounds, msDur(s.DurationMs))
	p("relay:    per round and variant: %d messages committed, then drained (msg/s from the relays' start to the last ack);", s.Messages)
	p("          then %d msg/s committed for %.1f s by %d producers while the relays run (latency: COMMIT sent to the broker's ack);", s.Rate, s.LatencyRun, s.Clients)
	p("          %d ordering keys, poll %v for both", s.Keys, msDur(s.PollMs))
	for _, db := range rep.Databases {
		p("")
		p("%s %s (%s)", db.Server.Name, db.Server.Version, settings(db.Server.Settings))
		if c := db.CPU; c != (CPUUse{}) {
			p("CPU time meanwhile, of all %d CPUs: bench %.0f%%, database servers %.0f%%, other processes %.0f%%", m.CPUs, 100*c.Bench, 100*c.Servers, 100*c.Other)
		}
		p("%-42s %7s %6s %6s %6s %-11s %5s %5s", "enqueue", "tx/s", "p50 ms", "p99 ms", "x bare", "(rounds)", "RT", "stmts")
		for _, r := range db.Enqueue {
			p("%-42s %7.0f %6.2f %6.2f %6.2f %-11s %5.1f %5.1f", r.Name, r.TPS, r.P50Ms, r.P99Ms, r.Ratio, fmt.Sprintf("(%.2f-%.2f)", r.RatioMin, r.RatioMax), r.RoundTrips, r.Statements)
		}
		p("%-26s %7s %-13s %7s %7s %7s %8s | %8s %8s %5s %5s %6s", "relay", "msg/s", "(rounds)", "p50 ms", "p99 ms", "rate", "prod p99", "enqueued", "instream", "lost", "dups", "again")
		for _, r := range db.Relay {
			p("%-26s %7.0f %-13s %7.1f %7.1f %7.0f %8.1f | %8d %8d %5d %5d %6d", r.Name, r.MsgPerSec, fmt.Sprintf("(%.0f-%.0f)", r.MsgPerSecMin, r.MsgPerSecMax),
				r.P50Ms, r.P99Ms, r.RateAchieved, r.ProducerP99Ms, r.Enqueued, r.InStream, r.Lost, r.StreamDuplicates, r.PublishedAgain)
		}
	}
	p("")
	p("x bare: time per transaction relative to the bare INSERT in the same round; RT, stmts: round trips and statements per")
	p("        transaction, BEGIN and COMMIT included. rate: the producers' achieved msg/s; prod p99: their transactions' p99 (ms).")
	p("instream: enqueued messages the stream holds (by Nats-Msg-Id); lost: the others; dups: stored twice; again: publishes of")
	p("        a message the broker had acknowledged already.")
	return nil
}
