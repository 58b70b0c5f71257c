package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
	"github.com/sqlonce/sqlonce/outbox/rabbitmq"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
)

// delivery is a message as the consumer gets it from the broker.
type delivery struct {
	ID, Key string
	Seq     int64
}

// broker is the broker of a run: the relays publish to it, the consumer
// reads from it, and the faults restart it.
type broker interface {
	Name() string
	// RelayEnv is the environment a relay process builds its publisher
	// from (childPublisher).
	RelayEnv() []string
	// Restart kills the broker with SIGKILL, leaves it down for down,
	// and starts it again on the same port and store.
	Restart(ctx context.Context, down time.Duration) error
	// Consume hands apply each delivery, one at a time in the order of
	// delivery, until ctx ends; a delivery is acked once apply returns
	// nil. When apply returns errCrash the consumer acts as one that died
	// after its commit, before the ack: the delivery is not acked, and the
	// broker delivers it again. A broker that is down is waited for.
	Consume(ctx context.Context, apply func(ctx context.Context, d delivery) error) error
	// Published counts the messages the broker stored (after its own
	// dedupe of ids).
	Published(ctx context.Context) (int64, error)
	// FetchFailures counts the consumer's fetches that failed (the broker
	// down or restarting).
	FetchFailures() int
	Close()
}

// errCrash is what the consumer's apply returns for a delivery whose ack
// must be lost, as if the consumer died between its commit and the ack.
var errCrash = errors.New("the consumer crashed after its commit, before the ack")

// The environment of a relay process's publisher.
const (
	brokerEnv  = "SQLONCE_OUTBOX_BROKER"
	natsURLEnv = "SQLONCE_OUTBOX_NATS_URL"
)

const (
	streamName    = "OUTBOX_CHECKER"
	subjectPrefix = "ck."
	durable       = "checker"
)

// natsBroker is NATS JetStream: a nats-server of the run's own
// (tests/internal/brokers, its streams on disk), a stream on ck.>, and a
// durable pull consumer that has one message unacked at a time, so that
// the consumer sees the stream's order.
type natsBroker struct {
	srv      *brokers.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	fetchErr int
}

// newNATS starts a nats-server (stopped when t ends; t is skipped, or
// failed under CI=true, without one) and sets up the stream and the
// consumer.
func newNATS(t testing.TB) (*natsBroker, error) {
	b := &natsBroker{srv: brokers.StartNATS(t)}
	var err error
	b.nc, err = nats.Connect(b.srv.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	b.js, err = jetstream.New(b.nc)
	if err != nil {
		b.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: streamName, Subjects: []string{subjectPrefix + ">"}, Storage: jetstream.FileStorage,
		// JetStream's own dedupe of message ids, at its shortest: the
		// republishes of a relay that died before marking a message
		// sent reach the consumer, whose inbox must drop them.
		Duplicates: 100 * time.Millisecond,
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("create stream: %w", err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second,
		MaxAckPending: 1, MaxDeliver: -1,
	}); err != nil {
		b.Close()
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	return b, nil
}

func (b *natsBroker) Name() string { return "NATS JetStream (" + b.srv.URL + ")" }

func (b *natsBroker) RelayEnv() []string {
	return []string{brokerEnv + "=nats", natsURLEnv + "=" + b.srv.URL}
}

func (b *natsBroker) Restart(_ context.Context, down time.Duration) error {
	if err := b.srv.Kill(); err != nil {
		return err
	}
	time.Sleep(down)
	return b.srv.Start()
}

func (b *natsBroker) Close() {
	if b.nc != nil {
		b.nc.Close()
	}
	_ = b.srv.Kill()
}

func (b *natsBroker) FetchFailures() int { return b.fetchErr }

func (b *natsBroker) Published(ctx context.Context) (int64, error) {
	for {
		s, err := b.js.Stream(ctx, streamName)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				return int64(info.State.Msgs), nil
			}
		}
		if ctx.Err() != nil {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *natsBroker) Consume(ctx context.Context, apply func(ctx context.Context, d delivery) error) error {
	var cons jetstream.Consumer
	for ctx.Err() == nil {
		if cons == nil {
			c, err := b.js.Consumer(ctx, streamName, durable)
			if err != nil {
				b.fetchErr++
				time.Sleep(100 * time.Millisecond)
				continue
			}
			cons = c
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			b.fetchErr++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for msg := range batch.Messages() {
			d, err := parseNATS(msg)
			if err != nil {
				d = delivery{ID: "unparsable: " + err.Error()}
			}
			if err := apply(ctx, d); errors.Is(err, errCrash) {
				continue // no ack: redelivered after the ack wait
			} else if err != nil {
				return nil // ctx ended: the message is left unacked
			}
			// A lost ack (the broker restarting) redelivers the message:
			// the inbox drops it.
			_ = msg.Ack()
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			b.fetchErr++
		}
	}
	return nil
}

func parseNATS(msg jetstream.Msg) (delivery, error) {
	d := delivery{ID: msg.Headers().Get(jetstream.MsgIDHeader), Key: msg.Headers().Get(natsjs.KeyHeader)}
	f := strings.Fields(string(msg.Data()))
	if len(f) != 2 || f[0] != d.Key {
		return d, fmt.Errorf("payload %q of message %q, key %q", msg.Data(), d.ID, d.Key)
	}
	seq, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return d, err
	}
	d.Seq = seq
	return d, nil
}

// childPublisher builds a relay process's publisher from its environment:
// the broker's adapter (outbox/natsjs, outbox/rabbitmq), each publish
// bounded to a second, and slow to return after the broker's ack, so that
// a SIGKILL lands between the ack and the message marked sent more often.
func childPublisher() (outbox.Publisher, func(), error) {
	var (
		pub   outbox.Publisher
		close func()
	)
	switch b := os.Getenv(brokerEnv); b {
	case "nats":
		nc, err := nats.Connect(os.Getenv(natsURLEnv), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		p, err := natsjs.New(js, natsjs.WithSubjectPrefix(subjectPrefix))
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		pub, close = p, nc.Close
	case "rabbitmq":
		p, err := rabbitmq.New(os.Getenv(rabbitURLEnv), rabbitmq.WithExchange(rabbitExchange), rabbitmq.WithTimeout(time.Second))
		if err != nil {
			return nil, nil, err
		}
		pub, close = p, func() { _ = p.Close() }
	default:
		return nil, nil, fmt.Errorf("%s=%q: no such broker", brokerEnv, b)
	}
	return slowAck(pub), close, nil
}

// publishErrorMark starts the line a relay process logs for each failed
// publish.
const publishErrorMark = "PUBLISH-FAILED"

// slowAck bounds each publish to a second and sleeps up to 20 ms after
// the broker's ack.
func slowAck(p outbox.Publisher) outbox.Publisher {
	return outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := p.Publish(ctx, m); err != nil {
			// Counted by the run from the relay's log (relays.publishErrors).
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", publishErrorMark, m.ID, err)
			return err
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		return nil
	})
}
