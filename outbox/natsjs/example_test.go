package natsjs_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
)

// A Publisher for a relay of package outbox: the stream ORDERS holds the
// subjects "orders.>", and keeps each message id for 10 minutes, so that a
// message the relay publishes again within them is stored once.
func Example() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"orders.>"},
		Duplicates: 10 * time.Minute,
	}); err != nil {
		log.Fatal(err)
	}

	pub, err := natsjs.New(js, natsjs.WithSubjectPrefix("orders."))
	if err != nil {
		log.Fatal(err)
	}
	// What a relay does with each committed message: nil once JetStream
	// stored it (or had it already).
	err = pub.Publish(ctx, outbox.Message{
		ID:      "order-42-placed",
		Topic:   "placed",
		Key:     "order-42",
		Payload: []byte(`{"order":42}`),
		Headers: map[string]string{"Content-Type": "application/json"},
	})
	if err != nil {
		log.Fatal(err)
	}
}
