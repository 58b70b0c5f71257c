package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce/outbox/rabbitmq"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
)

// The environment of a relay process's RabbitMQ publisher.
const rabbitURLEnv = "SQLONCE_OUTBOX_RABBITMQ_URL"

const (
	rabbitExchange = "outbox-checker"
	rabbitQueue    = "outbox-checker"
)

// rabbitBroker is RabbitMQ: a node of the run's own, a durable topic
// exchange the relays publish to (persistent messages, publisher
// confirms), and a durable queue bound to the topic that the consumer
// reads with a prefetch of one, so that it sees the queue's order.
type rabbitBroker struct {
	srv      *brokers.Server
	fetchErr atomic.Int64
}

// newRabbitMQ starts a RabbitMQ node and declares the exchange and the
// queue.
func newRabbitMQ(t testing.TB) (*rabbitBroker, error) {
	b := &rabbitBroker{srv: brokers.StartRabbitMQ(t)}
	t.Cleanup(b.Close)
	conn, err := amqp.Dial(b.srv.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.ExchangeDeclare(rabbitExchange, "topic", true, false, false, false, nil); err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(rabbitQueue, true, false, false, false, nil); err != nil {
		return nil, err
	}
	if err := ch.QueueBind(rabbitQueue, topic, rabbitExchange, false, nil); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *rabbitBroker) Name() string { return "RabbitMQ (" + b.srv.URL + ")" }

func (b *rabbitBroker) RelayEnv() []string {
	return []string{brokerEnv + "=rabbitmq", rabbitURLEnv + "=" + b.srv.URL}
}

func (b *rabbitBroker) Restart(_ context.Context, down time.Duration) error {
	if err := b.srv.Kill(); err != nil {
		return err
	}
	time.Sleep(down)
	return b.srv.Start()
}

func (b *rabbitBroker) Close() { _ = b.srv.Kill() }

func (b *rabbitBroker) FetchFailures() int { return int(b.fetchErr.Load()) }

// Published is unknown: a queue tells what it holds, not what it took.
func (b *rabbitBroker) Published(context.Context) (int64, error) { return -1, nil }

func (b *rabbitBroker) Consume(ctx context.Context, apply func(ctx context.Context, d delivery) error) error {
	for ctx.Err() == nil {
		if err := b.consumeOnce(ctx, apply); err != nil {
			b.fetchErr.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// consumeOnce consumes on one connection until it fails or ctx ends.
func (b *rabbitBroker) consumeOnce(ctx context.Context, apply func(ctx context.Context, d delivery) error) error {
	conn, err := amqp.DialConfig(b.srv.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(1, 0, false); err != nil {
		return err
	}
	msgs, err := ch.Consume(rabbitQueue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-msgs:
			if !ok {
				return fmt.Errorf("deliveries closed")
			}
			d, err := parseRabbit(m)
			if err != nil {
				d = delivery{ID: "unparsable: " + err.Error()}
			}
			if err := apply(ctx, d); errors.Is(err, errCrash) {
				return err // the connection closes unacked: the queue delivers it again
			} else if err != nil {
				return nil // ctx ended: the message is left unacked
			}
			// A lost ack (the broker restarting) redelivers the message:
			// the inbox drops it.
			_ = m.Ack(false)
		}
	}
}

func parseRabbit(m amqp.Delivery) (delivery, error) {
	key, _ := m.Headers[rabbitmq.KeyHeader].(string)
	d := delivery{ID: m.MessageId, Key: key}
	f := strings.Fields(string(m.Body))
	if len(f) != 2 || f[0] != d.Key {
		return d, fmt.Errorf("payload %q of message %q, key %q", m.Body, d.ID, d.Key)
	}
	seq, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return d, err
	}
	d.Seq = seq
	return d, nil
}
