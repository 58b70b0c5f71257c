// Package outboxbroker_test tests the outbox's broker adapters,
// outbox/natsjs and outbox/rabbitmq, against real brokers run as child
// processes (tests/internal/brokers): what a consumer receives is counted
// on the broker, across duplicates, unroutable messages, concurrent
// publishers and a broker killed (SIGKILL) and started again on the same
// data mid-stream.
package outboxbroker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
)

// natsReceived is what a consumer of the stream received: the messages,
// by id, in the stream's order.
type natsReceived struct {
	byID  map[string][]jetstream.Msg
	order []string
}

// jsConnect connects to s, reconnecting for good, and returns its JetStream
// context.
func jsConnect(t *testing.T, s *brokers.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second),
		// The default prints the connection's errors (the reset when the
		// broker is killed) to stderr; Publish returns what matters.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// createStream creates the stream name holding subjects, with a duplicate
// window of a minute, on files.
func createStream(t *testing.T, js jetstream.JetStream, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   subjects,
		Storage:    jetstream.FileStorage,
		Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// consumeAll reads every message of the stream with an ordered consumer.
func consumeAll(t *testing.T, st jetstream.Stream) natsReceived {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Msgs)
	got := natsReceived{byID: map[string][]jetstream.Msg{}}
	if want == 0 {
		return got
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < want; {
		batch, err := c.Fetch(want-n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			id := m.Headers().Get(jetstream.MsgIDHeader)
			got.byID[id] = append(got.byID[id], m)
			got.order = append(got.order, id)
			n++
		}
		if err := batch.Error(); err != nil {
			t.Fatalf("fetch after %d of %d messages: %v", n, want, err)
		}
	}
	return got
}

func TestNATS(t *testing.T) {
	s := brokers.StartNATS(t)
	_, js := jsConnect(t, s)
	ctx := context.Background()

	t.Run("ConfirmedArriveOnce", func(t *testing.T) {
		st := createStream(t, js, "ONCE", "once.>")
		pub, err := natsjs.New(js, natsjs.WithSubjectPrefix("once."))
		if err != nil {
			t.Fatal(err)
		}
		const n = 50
		for i := range n {
			m := outbox.Message{
				ID:      fmt.Sprintf("m-%d", i),
				Topic:   fmt.Sprintf("orders.%d", i%3),
				Key:     fmt.Sprintf("order-%d", i%5),
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				Headers: map[string]string{"Content-Type": "application/json", "Trace": fmt.Sprint(i)},
			}
			if i%10 == 0 {
				m.Key = "" // no key header
			}
			if err := pub.Publish(ctx, m); err != nil {
				t.Fatalf("publish %s: %v", m.ID, err)
			}
		}
		got := consumeAll(t, st)
		if len(got.order) != n || len(got.byID) != n {
			t.Fatalf("received %d messages, %d ids; want %d once each", len(got.order), len(got.byID), n)
		}
		for i := range n {
			id := fmt.Sprintf("m-%d", i)
			ms := got.byID[id]
			if len(ms) != 1 {
				t.Fatalf("%s received %d times", id, len(ms))
			}
			m := ms[0]
			if want := fmt.Sprintf("once.orders.%d", i%3); m.Subject() != want {
				t.Errorf("%s: subject %q, want %q", id, m.Subject(), want)
			}
			if want := fmt.Sprintf(`{"n":%d}`, i); string(m.Data()) != want {
				t.Errorf("%s: payload %q, want %q", id, m.Data(), want)
			}
			h := m.Headers()
			if h.Get("Content-Type") != "application/json" || h.Get("Trace") != fmt.Sprint(i) {
				t.Errorf("%s: headers %v", id, h)
			}
			wantKey := fmt.Sprintf("order-%d", i%5)
			if i%10 == 0 {
				wantKey = ""
			}
			if got := h.Get(natsjs.KeyHeader); got != wantKey {
				t.Errorf("%s: key header %q, want %q", id, got, wantKey)
			}
			if _, ok := h[natsjs.KeyHeader]; !ok && wantKey != "" {
				t.Errorf("%s: no key header", id)
			}
		}
	})

	t.Run("DuplicateDropped", func(t *testing.T) {
		st := createStream(t, js, "DUP", "dup.>")
		pub, err := natsjs.New(js, natsjs.WithKeyHeader("Order-Key"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			// The same id, published again as a relay does after a lost
			// ack; a changed payload shows which one was stored.
			m := outbox.Message{ID: "dup-1", Topic: "dup.x", Key: "k", Payload: []byte(fmt.Sprint(i))}
			if err := pub.Publish(ctx, m); err != nil {
				t.Fatalf("publish %d of dup-1: %v", i, err)
			}
		}
		if err := pub.Publish(ctx, outbox.Message{ID: "dup-2", Topic: "dup.x", Payload: []byte("other")}); err != nil {
			t.Fatal(err)
		}
		got := consumeAll(t, st)
		if len(got.order) != 2 || len(got.byID["dup-1"]) != 1 || len(got.byID["dup-2"]) != 1 {
			t.Fatalf("received %v; want dup-1 and dup-2 once each", got.order)
		}
		if m := got.byID["dup-1"][0]; string(m.Data()) != "0" || m.Headers().Get("Order-Key") != "k" {
			t.Fatalf("dup-1 stored as %q with headers %v; want the first publish's", m.Data(), m.Headers())
		}
	})

	t.Run("NoStream", func(t *testing.T) {
		pub, err := natsjs.New(js)
		if err != nil {
			t.Fatal(err)
		}
		err = pub.Publish(ctx, outbox.Message{ID: "lost-1", Topic: "nostream.x"})
		if !errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, outbox.ErrPermanent) {
			t.Fatalf("publish to a subject of no stream: %v, want jetstream.ErrNoStreamResponse, not permanent", err)
		}
	})

	t.Run("InvalidArguments", func(t *testing.T) {
		if _, err := natsjs.New(nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("New(nil): %v", err)
		}
		for name, opt := range map[string]natsjs.Option{
			"nil":             nil,
			"prefix empty":    natsjs.WithSubjectPrefix(""),
			"prefix space":    natsjs.WithSubjectPrefix("a b."),
			"prefix wildcard": natsjs.WithSubjectPrefix("a.*."),
			"prefix gap":      natsjs.WithSubjectPrefix("a..b."),
			"key header id":   natsjs.WithKeyHeader("Nats-Msg-Id"),
			"key header ':'":  natsjs.WithKeyHeader("a:b"),
			"key header ''":   natsjs.WithKeyHeader(""),
		} {
			if _, err := natsjs.New(js, opt); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("New with option %s: %v", name, err)
			}
		}
		pub, err := natsjs.New(js)
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range map[string]outbox.Message{
			"no id":          {Topic: "once.x"},
			"no topic":       {ID: "x"},
			"wildcard":       {ID: "x", Topic: "once.>"},
			"space":          {ID: "x", Topic: "once. x"},
			"header name":    {ID: "x", Topic: "once.x", Headers: map[string]string{"a b": "v"}},
			"header value":   {ID: "x", Topic: "once.x", Headers: map[string]string{"a": "v\r\nX: y"}},
			"key with CR LF": {ID: "x", Topic: "once.x", Key: "k\r\n"},
		} {
			if err := pub.Publish(ctx, m); !errors.Is(err, sqlonce.ErrInvalidArgument) || !errors.Is(err, outbox.ErrPermanent) {
				t.Errorf("Publish %s: %v, want ErrInvalidArgument and ErrPermanent", name, err)
			}
		}
	})

	t.Run("Concurrent16", func(t *testing.T) {
		st := createStream(t, js, "RACE", "race.>")
		pub, err := natsjs.New(js, natsjs.WithSubjectPrefix("race."))
		if err != nil {
			t.Fatal(err)
		}
		// 16 goroutines publish 100 ids, each id by 4 of them at once.
		const goroutines, ids, racers = 16, 100, 4
		var wg sync.WaitGroup
		var failed atomic.Int64
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ids {
					if i%(goroutines/racers) != g%(goroutines/racers) {
						continue
					}
					m := outbox.Message{ID: fmt.Sprintf("r-%d", i), Topic: fmt.Sprintf("k%d", i%7), Key: fmt.Sprintf("k%d", i%7), Payload: []byte(fmt.Sprint(g))}
					if err := pub.Publish(ctx, m); err != nil {
						failed.Add(1)
						t.Errorf("goroutine %d: publish %s: %v", g, m.ID, err)
					}
				}
			}()
		}
		wg.Wait()
		if failed.Load() > 0 {
			t.FailNow()
		}
		got := consumeAll(t, st)
		if len(got.order) != ids || len(got.byID) != ids {
			t.Fatalf("stream holds %d messages of %d ids; want %d, once each", len(got.order), len(got.byID), ids)
		}
	})
}

// TestNATSRestart kills the broker (SIGKILL) while four publishers publish
// as relays do (a message again until JetStream acknowledges it), checks
// that publishing fails while it is down, starts it again on the same
// port and data, and counts what a consumer receives: every acknowledged
// message, once.
func TestNATSRestart(t *testing.T) {
	s := brokers.StartNATS(t)
	_, js := jsConnect(t, s)
	st := createStream(t, js, "RESTART", "restart.>")
	pub, err := natsjs.New(js)
	if err != nil {
		t.Fatal(err)
	}
	down, errs := relayThroughCrash(t, s, func(ctx context.Context, m outbox.Message) error {
		m.Topic = "restart." + m.Topic
		return pub.Publish(ctx, m)
	})
	t.Logf("%d publishes failed around the crash, %d while the broker was down", errs, down)
	got := consumeAll(t, st)
	for i := range relayMessages {
		id := fmt.Sprintf("c-%d", i)
		if n := len(got.byID[id]); n != 1 {
			t.Errorf("%s acknowledged, received %d times", id, n)
		}
	}
	// The probe published while the broker was down may have been
	// stored after all (the client keeps what it could not send for its
	// reconnection), once at most.
	if probes := len(got.byID[downProbe]); len(got.order) != relayMessages+probes || probes > 1 {
		t.Errorf("the stream holds %d messages, %d of them the probe; want %d and the probe once at most", len(got.order), len(got.byID[downProbe]), relayMessages)
	}
}
