package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/outbox"
)

// Consume, write and produce in one transaction: two services pass an
// order through a broker, and each effect happens once.
//
// The order service (A) writes an order and enqueues "order placed"
// beside it. Its relay publishes the message. The shipping service (B)
// consumes it and, in ONE transaction of its own database, claims the
// message id in its inbox, writes a shipment and enqueues "shipment
// created"; it commits, then acks. The broker delivers ord-1's message
// twice (as after an ack lost on the way): the inbox sees its id again
// and the second delivery changes nothing, so the order gets one
// shipment and one "shipment created". B's relay publishes that one on.
//
// The broker here is a Go channel behind a PublisherFunc, so that the
// example runs without a server; in production the Publisher is
// outbox/natsjs's (NATS JetStream) or outbox/rabbitmq's, and B reads the
// broker's deliveries, acking each after its COMMIT.
func Example_consumeWriteProduce() {
	ctx := context.Background()
	dbA, drvA, doneA := openDB(tables) // service A's database: orders
	defer doneA()
	dbB, drvB, doneB := openDB(shippingTables) // service B's: shipments
	defer doneB()
	outA, err := outbox.New(drvA)
	if err != nil {
		panic(err)
	}
	inB, err := inbox.New(drvB, "shipping")
	if err != nil {
		panic(err)
	}
	outB, err := outbox.New(drvB)
	if err != nil {
		panic(err)
	}

	// Service A: the order and its message, in one transaction.
	for _, code := range []string{"ord-1", "ord-2"} {
		err := inTx(ctx, dbA, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", code, 4200); err != nil {
				return err
			}
			_, err := outA.Enqueue(ctx, tx, outbox.Message{
				ID:      "order-placed:" + code, // B's inbox key
				Topic:   "orders.placed",
				Key:     "customer-7", // in order, one after the other
				Payload: fmt.Appendf(nil, `{"code":%q}`, code),
			})
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	// The broker: a queue of deliveries. When told to, it delivers the
	// first message it is given twice, on purpose.
	broker := make(chan outbox.Message, 10)
	toBroker := func(n int, redeliver bool, cancel context.CancelFunc) outbox.Publisher {
		published := 0
		return outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
			broker <- m
			if published++; published == 1 && redeliver {
				broker <- m // the redelivery
			}
			if published == n {
				cancel() // the example's relay stops here; a program's runs on
			}
			return nil // the broker confirmed m
		})
	}
	relay := func(store *outbox.Store[*sql.Tx], n int, redeliver bool) {
		ctx, cancel := context.WithCancel(ctx)
		_ = store.Relay(ctx, toBroker(n, redeliver, cancel), outbox.WithPollInterval(10*time.Millisecond))
	}
	relay(outA, 2, true) // A's relay, until it published its two messages

	// Service B: the inbox claim, the shipment and its message, in one
	// transaction; commit, then ack.
	consume := func(m outbox.Message) error {
		var order struct{ Code string }
		if err := json.Unmarshal(m.Payload, &order); err != nil {
			return err
		}
		tx, err := dbB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := inB.HandleTx(ctx, tx, m.ID, func(ctx context.Context) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO shipments (order_code) VALUES (?)", order.Code); err != nil {
				return err
			}
			_, err := outB.Enqueue(ctx, tx, outbox.Message{
				ID:      "shipment-created:" + order.Code,
				Topic:   "shipments.created",
				Key:     "customer-7",
				Payload: fmt.Appendf(nil, `{"order":%q}`, order.Code),
			})
			return err
		})
		if err != nil {
			return err // no ack: the broker delivers m again
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		fmt.Printf("B: %s %s, ack\n", m.ID, res)
		return nil
	}
	for range 3 {
		if err := consume(<-broker); err != nil {
			panic(err)
		}
	}

	relay(outB, 2, false) // B's relay publishes the shipments
	for range 2 {
		m := <-broker // what a downstream service consumes, with an inbox of its own
		fmt.Printf("downstream: %s %s\n", m.ID, m.Payload)
	}

	var shipments int
	if err := dbB.QueryRowContext(ctx, "SELECT COUNT(*) FROM shipments").Scan(&shipments); err != nil {
		panic(err)
	}
	st, err := outB.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("B: %d shipments, %d messages sent\n", shipments, st.Sent)
	// Output:
	// B: order-placed:ord-1 first run, ack
	// B: order-placed:ord-1 already done, ack
	// B: order-placed:ord-2 first run, ack
	// downstream: shipment-created:ord-1 {"order":"ord-1"}
	// downstream: shipment-created:ord-2 {"order":"ord-2"}
	// B: 2 shipments, 2 messages sent
}

// shippingTables is service B's business table.
const shippingTables = `
CREATE TABLE shipments (
    id         INTEGER PRIMARY KEY,
    order_code TEXT    NOT NULL UNIQUE
);`
