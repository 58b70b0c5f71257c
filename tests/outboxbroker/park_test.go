package outboxbroker_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// parkRetry: three attempts, a millisecond apart.
var parkRetry = outbox.WithRetry(3, time.Millisecond, 2*time.Millisecond)

// relayUntil enqueues msgs on a SQLite outbox, runs a relay through p
// until cond holds for the store, and returns the store.
func relayUntil(t *testing.T, p outbox.Publisher, msgs []outbox.Message, what string, cond func(*outbox.Store[*sql.Tx]) bool) *outbox.Store[*sql.Tx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := harness.SQLite(t, 0)
	s, err := outbox.New(db.Driver())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		err := harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
			_, err := s.Enqueue(ctx, tx, m)
			return err
		})
		if err != nil {
			t.Fatalf("enqueue %s: %v", m.ID, err)
		}
	}
	runRelayUntil(ctx, t, s, p, what, cond)
	return s
}

// runRelayUntil runs a relay of s through p until cond holds.
func runRelayUntil(ctx context.Context, t *testing.T, s *outbox.Store[*sql.Tx], p outbox.Publisher, what string, cond func(*outbox.Store[*sql.Tx]) bool) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Relay(rctx, p, outbox.WithPollInterval(10*time.Millisecond), parkRetry) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond(s) {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// wantInfo checks a message's state and attempts.
func wantInfo(t *testing.T, s *outbox.Store[*sql.Tx], id string, state outbox.State, attempts int) {
	t.Helper()
	inf, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if inf.State != state || inf.Attempts != attempts {
		t.Errorf("%s: %v after %d attempts (last error %q), want %v after %d", id, inf.State, inf.Attempts, inf.LastError, state, attempts)
	}
}

func stats(s *outbox.Store[*sql.Tx]) outbox.Stats {
	st, err := s.Stats(context.Background())
	if err != nil {
		panic(err)
	}
	return st
}

// TestRelayParks checks how a relay treats the adapters' refusals: a
// message an adapter refuses before sending it is parked at its first
// attempt (outbox.Permanent); one the broker has no destination for yet
// (no stream, no queue bound) is retried and parked after the last
// attempt, and goes once the destination exists and it is re-driven.
func TestRelayParks(t *testing.T) {
	t.Run("NATS", func(t *testing.T) {
		s := brokers.StartNATS(t)
		_, js := jsConnect(t, s)
		pub, err := natsjs.New(js)
		if err != nil {
			t.Fatal(err)
		}
		store := relayUntil(t, pub, []outbox.Message{
			{ID: "wildcard", Topic: "park.*", Key: "a"},
			{ID: "no-stream", Topic: "park.x", Key: "b"},
		}, "2 parked", func(s *outbox.Store[*sql.Tx]) bool { return stats(s).Parked == 2 })
		wantInfo(t, store, "wildcard", outbox.Parked, 1)
		wantInfo(t, store, "no-stream", outbox.Parked, 3)

		st := createStream(t, js, "PARK", "park.>")
		if err := store.Redrive(context.Background(), "no-stream"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runRelayUntil(ctx, t, store, pub, "no-stream sent", func(s *outbox.Store[*sql.Tx]) bool { return stats(s).Sent == 1 })
		if got := consumeAll(t, st); len(got.order) != 1 || len(got.byID["no-stream"]) != 1 {
			t.Fatalf("stream holds %v, want no-stream once", got.order)
		}
	})

	t.Run("RabbitMQ", func(t *testing.T) {
		s := brokers.StartRabbitMQ(t)
		ch := amqpChannel(t, s)
		pub := newRabbit(t, s.URL)
		store := relayUntil(t, pub, []outbox.Message{
			{ID: "unroutable", Topic: "park-later", Key: "a"},
		}, "1 parked", func(s *outbox.Store[*sql.Tx]) bool { return stats(s).Parked == 1 })
		wantInfo(t, store, "unroutable", outbox.Parked, 3)

		declareQueue(t, ch, "park-later")
		if err := store.Redrive(context.Background(), "unroutable"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runRelayUntil(ctx, t, store, pub, "unroutable sent", func(s *outbox.Store[*sql.Tx]) bool { return stats(s).Sent == 1 })
		if got, total := drain(t, ch, "park-later"); total != 1 || len(got["unroutable"]) != 1 {
			t.Fatalf("queue received %d messages %v, want unroutable once", total, got)
		}

		// What the outbox lets through and RabbitMQ cannot take does not
		// exist (the outbox bounds the topic to 255 bytes, as AMQP's
		// routing key): a Publisher wrapping rabbitmq's shows the relay
		// parking its refusal at once.
		wrapped := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
			m.ID = "" // a wrapper's bug
			return pub.Publish(ctx, m)
		})
		store = relayUntil(t, wrapped, []outbox.Message{{ID: "no-id", Topic: "q"}},
			"1 parked", func(s *outbox.Store[*sql.Tx]) bool { return stats(s).Parked == 1 })
		wantInfo(t, store, "no-id", outbox.Parked, 1)
	})
}
