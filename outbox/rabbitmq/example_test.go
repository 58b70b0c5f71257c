package rabbitmq_test

import (
	"context"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/rabbitmq"
)

// A Publisher for a relay of package outbox, publishing to the exchange
// "orders" (a topic exchange the consumers bind their durable queues to).
func Example() {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	// The topology, declared once (the consumers' side may own it).
	conn, err := amqp.Dial(url)
	if err != nil {
		log.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := ch.ExchangeDeclare("orders", "topic", true, false, false, false, nil); err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("billing", true, false, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "order.*", "orders", false, nil); err != nil {
		log.Fatal(err)
	}
	conn.Close()

	pub, err := rabbitmq.New(url, rabbitmq.WithExchange("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	// What a relay does with each committed message: nil once the broker
	// confirmed it; rabbitmq.ErrUnroutable if no queue is bound to its
	// routing key.
	err = pub.Publish(context.Background(), outbox.Message{
		ID:      "order-42-placed",
		Topic:   "order.placed",
		Key:     "order-42",
		Payload: []byte(`{"order":42}`),
		Headers: map[string]string{"Content-Type": "application/json"},
	})
	if err != nil {
		log.Fatal(err)
	}
}
