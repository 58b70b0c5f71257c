package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce/outbox"
)

// A broker refuses a message for good: the relay parks it, and it holds
// back the later message of its key. An operator finds it with Stats and
// List, mends the cause and re-drives it; both messages then leave, in
// order.
func ExampleStore_Redrive() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()
	store, err := outbox.New(drv)
	if err != nil {
		panic(err)
	}
	for i, id := range []string{"invoice-1", "invoice-2"} {
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := store.Enqueue(ctx, tx, outbox.Message{ID: id, Topic: "invoices", Key: "customer-7", Payload: fmt.Append(nil, i+1)})
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	refuse := true
	publisher := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
		if refuse {
			fmt.Println("refused", m.ID)
			return outbox.Permanent(errors.New("invoices: no such stream"))
		}
		fmt.Println("published", m.ID)
		return nil
	})
	// relay runs a relay, as a program does in a goroutine of its own,
	// until the outbox's Stats say so.
	relay := func(until func(outbox.Stats) bool) {
		ctx, cancel := context.WithCancel(ctx)
		stopped := make(chan error)
		go func() { stopped <- store.Relay(ctx, publisher, outbox.WithPollInterval(10*time.Millisecond)) }()
		for {
			st, err := store.Stats(ctx)
			if err != nil {
				panic(err)
			}
			if until(st) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-stopped
	}
	relay(func(st outbox.Stats) bool { return st.Parked == 1 })

	st, err := store.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending %d, parked %d\n", st.Pending, st.Parked)
	parked, err := store.List(ctx, outbox.Parked, 0, 10)
	if err != nil {
		panic(err)
	}
	for _, inf := range parked {
		fmt.Printf("%s: %v after %d attempt(s): %s\n", inf.ID, inf.State, inf.Attempts, inf.LastError)
	}

	refuse = false // the stream was created
	if err := store.Redrive(ctx, "invoice-1"); err != nil {
		panic(err)
	}
	relay(func(st outbox.Stats) bool { return st.Sent == 2 })
	// Output:
	// refused invoice-1
	// pending 1, parked 1
	// invoice-1: parked after 1 attempt(s): permanent: invoices: no such stream
	// published invoice-1
	// published invoice-2
}
