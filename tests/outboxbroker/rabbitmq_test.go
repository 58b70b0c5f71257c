package outboxbroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/rabbitmq"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
)

// amqpChannel opens a connection and channel of the test's own to s, for
// the topology and the consumer.
func amqpChannel(t *testing.T, s *brokers.Server) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declareQueue declares a durable queue.
func declareQueue(t *testing.T, ch *amqp.Channel, name string) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// drain takes every message of the queue (basic.get, acknowledged) and
// returns them by MessageId, and their count.
func drain(t *testing.T, ch *amqp.Channel, queue string) (map[string][]amqp.Delivery, int) {
	t.Helper()
	got := map[string][]amqp.Delivery{}
	n := 0
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got, n
		}
		got[d.MessageId] = append(got[d.MessageId], d)
		n++
	}
}

func newRabbit(t *testing.T, url string, opts ...rabbitmq.Option) *rabbitmq.Publisher {
	t.Helper()
	p, err := rabbitmq.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestRabbitMQ(t *testing.T) {
	s := brokers.StartRabbitMQ(t)
	ch := amqpChannel(t, s)
	ctx := context.Background()

	t.Run("ConfirmedArriveOnce", func(t *testing.T) {
		declareQueue(t, ch, "once")
		pub := newRabbit(t, s.URL)
		const n = 50
		for i := range n {
			m := outbox.Message{
				ID:      fmt.Sprintf("m-%d", i),
				Topic:   "once",
				Key:     fmt.Sprintf("order-%d", i%5),
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				Headers: map[string]string{"Content-Type": "application/json", "Trace": fmt.Sprint(i)},
			}
			if i%10 == 0 {
				m.Key = ""
			}
			if err := pub.Publish(ctx, m); err != nil {
				t.Fatalf("publish %s: %v", m.ID, err)
			}
		}
		got, total := drain(t, ch, "once")
		if total != n || len(got) != n {
			t.Fatalf("received %d messages, %d ids; want %d once each", total, len(got), n)
		}
		for i := range n {
			id := fmt.Sprintf("m-%d", i)
			if len(got[id]) != 1 {
				t.Fatalf("%s received %d times", id, len(got[id]))
			}
			d := got[id][0]
			if want := fmt.Sprintf(`{"n":%d}`, i); string(d.Body) != want {
				t.Errorf("%s: body %q, want %q", id, d.Body, want)
			}
			if d.DeliveryMode != amqp.Persistent {
				t.Errorf("%s: delivery mode %d, want persistent", id, d.DeliveryMode)
			}
			if d.Headers["Content-Type"] != "application/json" || d.Headers["Trace"] != fmt.Sprint(i) {
				t.Errorf("%s: headers %v", id, d.Headers)
			}
			key, has := d.Headers[rabbitmq.KeyHeader]
			if i%10 == 0 {
				if has {
					t.Errorf("%s: key header %v for an empty key", id, key)
				}
			} else if want := fmt.Sprintf("order-%d", i%5); key != want {
				t.Errorf("%s: key header %v, want %q", id, key, want)
			}
		}
	})

	t.Run("Unroutable", func(t *testing.T) {
		declareQueue(t, ch, "after-unroutable")
		// One channel, so that the next publish runs on the channel the
		// return came on.
		pub := newRabbit(t, s.URL, rabbitmq.WithMaxChannels(1), rabbitmq.WithKeyHeader("Order-Key"))
		for i := range 3 {
			err := pub.Publish(ctx, outbox.Message{ID: fmt.Sprintf("u-%d", i), Topic: "no-such-queue", Key: "k"})
			if !errors.Is(err, rabbitmq.ErrUnroutable) || errors.Is(err, outbox.ErrPermanent) {
				t.Fatalf("publish to a routing key no queue takes: %v, want ErrUnroutable, not permanent", err)
			}
			if err := pub.Publish(ctx, outbox.Message{ID: fmt.Sprintf("a-%d", i), Topic: "after-unroutable", Key: "k"}); err != nil {
				t.Fatalf("publish after an unroutable one: %v", err)
			}
		}
		got, total := drain(t, ch, "after-unroutable")
		if total != 3 || len(got) != 3 || got["a-0"][0].Headers["Order-Key"] != "k" {
			t.Fatalf("received %d messages %v; want a-0..a-2 once each with Order-Key", total, got)
		}
	})

	t.Run("Exchange", func(t *testing.T) {
		if err := ch.ExchangeDeclare("orders", "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		declareQueue(t, ch, "billing")
		if err := ch.QueueBind("billing", "order.*", "orders", false, nil); err != nil {
			t.Fatal(err)
		}
		pub := newRabbit(t, s.URL, rabbitmq.WithExchange("orders"))
		if err := pub.Publish(ctx, outbox.Message{ID: "e-1", Topic: "order.placed"}); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, outbox.Message{ID: "e-2", Topic: "invoice.sent"}); !errors.Is(err, rabbitmq.ErrUnroutable) {
			t.Fatalf("publish to a key no binding matches: %v, want ErrUnroutable", err)
		}
		got, total := drain(t, ch, "billing")
		if total != 1 || len(got["e-1"]) != 1 {
			t.Fatalf("billing received %d messages %v; want e-1", total, got)
		}
	})

	t.Run("MissingExchange", func(t *testing.T) {
		pub := newRabbit(t, s.URL, rabbitmq.WithExchange("no-such-exchange"), rabbitmq.WithMaxChannels(1))
		for i := range 2 {
			err := pub.Publish(ctx, outbox.Message{ID: fmt.Sprintf("x-%d", i), Topic: "once"})
			var ae *amqp.Error
			if !errors.As(err, &ae) || ae.Code != amqp.NotFound || errors.Is(err, outbox.ErrPermanent) {
				t.Fatalf("publish %d to a missing exchange: %v, want a 404 channel error", i, err)
			}
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		if _, err := rabbitmq.New("http://127.0.0.1/"); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("New with an http URL: %v", err)
		}
		for name, opt := range map[string]rabbitmq.Option{
			"nil":                 nil,
			"exchange too long":   rabbitmq.WithExchange(strings.Repeat("x", 256)),
			"key header empty":    rabbitmq.WithKeyHeader(""),
			"max channels 0":      rabbitmq.WithMaxChannels(0),
			"max channels 2048":   rabbitmq.WithMaxChannels(2048),
			"timeout 0":           rabbitmq.WithTimeout(0),
			"config with recover": rabbitmq.WithConfig(amqp.Config{Recovery: &amqp.Recovery{}}),
		} {
			if _, err := rabbitmq.New(s.URL, opt); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("New with option %s: %v", name, err)
			}
		}
		pub := newRabbit(t, s.URL)
		for name, m := range map[string]outbox.Message{
			"no id":             {Topic: "once"},
			"routing key > 255": {ID: "x", Topic: strings.Repeat("k", 256)},
		} {
			if err := pub.Publish(ctx, m); !errors.Is(err, sqlonce.ErrInvalidArgument) || !errors.Is(err, outbox.ErrPermanent) {
				t.Errorf("Publish %s: %v, want ErrInvalidArgument and ErrPermanent", name, err)
			}
		}
	})

	t.Run("Close", func(t *testing.T) {
		declareQueue(t, ch, "close")
		pub := newRabbit(t, s.URL)
		if err := pub.Publish(ctx, outbox.Message{ID: "c-1", Topic: "close"}); err != nil {
			t.Fatal(err)
		}
		if err := pub.Close(); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, outbox.Message{ID: "c-2", Topic: "close"}); !errors.Is(err, rabbitmq.ErrClosed) {
			t.Fatalf("publish after Close: %v, want ErrClosed", err)
		}
		if err := pub.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})

	t.Run("Concurrent16", func(t *testing.T) {
		declareQueue(t, ch, "race")
		// Fewer channels than goroutines: publishes wait for one, and
		// every channel carries confirms and returns of many messages.
		pub := newRabbit(t, s.URL, rabbitmq.WithMaxChannels(4))
		const goroutines, each = 16, 40
		var wg sync.WaitGroup
		var wrong atomic.Int64
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					m := outbox.Message{ID: fmt.Sprintf("r-%d-%d", g, i), Topic: "race", Key: fmt.Sprintf("k%d", i%3)}
					unroutable := i%4 == 3
					if unroutable {
						m.Topic = "nowhere"
					}
					err := pub.Publish(ctx, m)
					if unroutable && !errors.Is(err, rabbitmq.ErrUnroutable) || !unroutable && err != nil {
						wrong.Add(1)
						t.Errorf("publish %s to %s: %v", m.ID, m.Topic, err)
					}
				}
			}()
		}
		wg.Wait()
		if wrong.Load() > 0 {
			t.FailNow()
		}
		got, total := drain(t, ch, "race")
		want := goroutines * each * 3 / 4
		if total != want || len(got) != want {
			t.Fatalf("received %d messages of %d ids; want %d once each", total, len(got), want)
		}
		for id := range got {
			var g, i int
			if _, err := fmt.Sscanf(id, "r-%d-%d", &g, &i); err != nil || i%4 == 3 {
				t.Errorf("received %q, never routed to the queue", id)
			}
		}
	})
}

// TestRabbitMQRestart kills the broker (SIGKILL) while four publishers
// publish as relays do (a message again until the broker confirms it),
// checks that publishing fails while it is down, starts it again on the
// same port and data, and counts what a consumer of the durable queue
// receives: every confirmed message, at least once (RabbitMQ does not
// dedupe: a message whose confirm the crash lost is there twice).
func TestRabbitMQRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the node boots three times, 10 to 40 s")
	}
	s := brokers.StartRabbitMQ(t)
	declareQueue(t, amqpChannel(t, s), "restart")
	// A clean restart first, so that the queue's declaration is on disk
	// for sure: twice in the first runs of this test (not since, in ~20),
	// a node killed within a second or two of its first boot came back
	// without the queue (its confirmed messages gone with it).
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	pub := newRabbit(t, s.URL)
	down, errs := relayThroughCrash(t, s, func(ctx context.Context, m outbox.Message) error {
		m.Topic = "restart"
		return pub.Publish(ctx, m)
	})
	t.Logf("%d publishes failed around the crash, %d while the broker was down", errs, down)
	ch := amqpChannel(t, s)
	if _, err := ch.QueueDeclarePassive("restart", true, false, false, false, nil); err != nil {
		t.Fatalf("the durable queue after the broker's restart: %v", err)
	}
	got, total := drain(t, ch, "restart")
	twice := 0
	for i := range relayMessages {
		id := fmt.Sprintf("c-%d", i)
		switch n := len(got[id]); {
		case n == 0:
			t.Errorf("%s confirmed, never received", id)
		case n > 1:
			twice++
		}
		delete(got, id)
	}
	delete(got, downProbe)
	if len(got) > 0 {
		t.Errorf("received messages never published: %v", got)
	}
	t.Logf("received %d messages for %d confirmed, %d of them more than once", total, relayMessages, twice)
}
