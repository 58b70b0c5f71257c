package outboxbroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
	"github.com/sqlonce/sqlonce/tests/internal/brokers"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

const (
	pipeOrders    = 120
	pipeCustomers = 6
	pipeAckWait   = time.Second
	// Every pipeLateAck-th message of a stream (by its sequence) is acked
	// late: only once JetStream has delivered it again.
	pipeLateAck = 5
)

// TestPipeline passes orders through NATS JetStream between services, as
// the outbox's example does with a channel: service A writes each order
// and enqueues "order placed" in one transaction; two relays publish
// them with natsjs; service B consumes each, and in ONE transaction of its
// own database claims it in its inbox, writes a shipment (a ledger row
// "ship:<order>") and enqueues "shipment created"; two relays of B publish
// those; service C consumes them, writing "bill:<order>" in its inbox's
// transaction. B and C ack every fifth message late, after JetStream
// delivered it again. Counted in the databases: each order one shipment,
// each shipment one bill, and the redeliveries answered AlreadyDone.
func TestPipeline(t *testing.T) {
	s := brokers.StartNATS(t)
	_, js := jsConnect(t, s)
	t.Run("Postgres", func(t *testing.T) { runPipeline(t, js, "pg", harness.Postgres) })
	t.Run("MySQL", func(t *testing.T) { runPipeline(t, js, "my", harness.MySQL) })
	t.Run("SQLite", func(t *testing.T) { runPipeline(t, js, "lite", harness.SQLite) })
}

func runPipeline[TTx any](t *testing.T, js jetstream.JetStream, name string, f harness.Factory[TTx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dbA, dbB, dbC := f(t, 16), f(t, 16), f(t, 16)
	st := createStream(t, js, "PIPE_"+strings.ToUpper(name), name+".>")
	pub, err := natsjs.New(js, natsjs.WithSubjectPrefix(name+"."))
	if err != nil {
		t.Fatal(err)
	}
	outA, err := outbox.New(dbA.Driver())
	if err != nil {
		t.Fatal(err)
	}
	outB, err := outbox.New(dbB.Driver())
	if err != nil {
		t.Fatal(err)
	}
	inB, err := inbox.New(dbB.Driver(), "shipping")
	if err != nil {
		t.Fatal(err)
	}
	inC, err := inbox.New(dbC.Driver(), "billing")
	if err != nil {
		t.Fatal(err)
	}

	// The relays, two per service, and the consumers run until the end.
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for _, o := range []*outbox.Store[TTx]{outA, outA, outB, outB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.Relay(rctx, pub, outbox.WithPollInterval(20*time.Millisecond), outbox.WithRetry(0, 10*time.Millisecond, 200*time.Millisecond)); !errors.Is(err, context.Canceled) {
				t.Errorf("relay: %v", err)
			}
		}()
	}
	b := &pipeConsumer[TTx]{t: t, db: dbB, in: inB, apply: func(ctx context.Context, tx TTx, code string) error {
		if err := dbB.Tx(tx).LedgerInsert(ctx, "ship:"+code, 1); err != nil {
			return err
		}
		_, err := outB.Enqueue(ctx, tx, outbox.Message{
			ID: "shipment-created:" + code, Topic: "shipments.created",
			Key: customerOf(code), Payload: []byte(code),
		})
		return err
	}}
	c := &pipeConsumer[TTx]{t: t, db: dbC, in: inC, apply: func(ctx context.Context, tx TTx, code string) error {
		return dbC.Tx(tx).LedgerInsert(ctx, "bill:"+code, 1)
	}}
	consB := b.start(rctx, t, st, "shipping", name+".orders.placed")
	consC := c.start(rctx, t, st, "billing", name+".shipments.created")

	// Service A: four producers, each order and its message in one
	// transaction.
	var pwg sync.WaitGroup
	for w := range 4 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := w; i < pipeOrders; i += 4 {
				code := fmt.Sprintf("ord-%d", i)
				err := retry(ctx, func() error {
					return harness.WithTx(ctx, dbA, harness.Default, func(tx TTx) error {
						if _, err := dbA.Tx(tx).OrderInsert(ctx, code, customerOf(code), int64(i)); err != nil {
							return err
						}
						_, err := outA.Enqueue(ctx, tx, outbox.Message{
							ID: "order-placed:" + code, Topic: "orders.placed",
							Key: customerOf(code), Payload: []byte(code),
						})
						return err
					})
				})
				if err != nil {
					t.Errorf("order %s: %v", code, err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Done when C billed every order and no delivery is pending anywhere.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		bills, err := dbC.Pool().LedgerCountPerRef(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(bills) == pipeOrders && idle(ctx, t, consB) && idle(ctx, t, consC) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d orders billed: %v", len(bills), pipeOrders, ctx.Err())
		case <-tick.C:
		}
	}
	stop()
	wg.Wait()

	ships, err := dbB.Pool().LedgerCountPerRef(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bills, err := dbC.Pool().LedgerCountPerRef(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orders, err := dbA.Pool().OrderCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if orders != pipeOrders || len(ships) != pipeOrders || len(bills) != pipeOrders {
		t.Fatalf("%d orders, %d shipped, %d billed; want %d each", orders, len(ships), len(bills), pipeOrders)
	}
	for i := range pipeOrders {
		code := fmt.Sprintf("ord-%d", i)
		if n := ships["ship:"+code]; n != 1 {
			t.Errorf("%s shipped %d times", code, n)
		}
		if n := bills["bill:"+code]; n != 1 {
			t.Errorf("%s billed %d times", code, n)
		}
	}
	for name, o := range map[string]*outbox.Store[TTx]{"A": outA, "B": outB} {
		st, err := o.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Sent != pipeOrders || st.Pending != 0 || st.Parked != 0 {
			t.Errorf("service %s's outbox: %+v, want %d sent", name, st, pipeOrders)
		}
	}
	for _, p := range []*pipeConsumer[TTx]{b, c} {
		if p.late.Load() == 0 || p.already.Load() < p.late.Load() {
			t.Errorf("%s: %d messages acked late, %d deliveries found already done; want some, and at least one per late ack", p.name, p.late.Load(), p.already.Load())
		}
		t.Logf("%s: %d applied, %d already done, %d acked late, %d failed (nak)", p.name, p.applied.Load(), p.already.Load(), p.late.Load(), p.failed.Load())
	}
}

// customerOf is the ordering key of an order.
func customerOf(code string) string {
	var i int
	fmt.Sscanf(code, "ord-%d", &i)
	return fmt.Sprint("customer-", i%pipeCustomers)
}

// retry runs fn again while its error is retryable.
func retry(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !sqlonce.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
	}
}

// pipeConsumer is a service consuming a subject with an inbox: apply runs
// in the inbox's transaction (HandleTx), committed before the ack.
type pipeConsumer[TTx any] struct {
	t     *testing.T
	name  string
	db    harness.DB[TTx]
	in    *inbox.Inbox[TTx]
	apply func(ctx context.Context, tx TTx, code string) error

	applied, already, late, failed atomic.Int64
	mu                             sync.Mutex
	waiting                        map[uint64]chan struct{} // late acks waiting for the redelivery
	redelivered                    map[uint64]bool
}

// start consumes subject with a durable consumer of its own until ctx
// ends; it returns the consumer.
func (p *pipeConsumer[TTx]) start(ctx context.Context, t *testing.T, st jetstream.Stream, durable, subject string) jetstream.Consumer {
	p.name, p.waiting, p.redelivered = durable, map[uint64]chan struct{}{}, map[uint64]bool{}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       pipeAckWait,
		MaxAckPending: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		// Each message in a goroutine, so that the consumer handles
		// deliveries of one message at once.
		go p.handle(ctx, m)
	}, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	context.AfterFunc(ctx, cc.Stop)
	return cons
}

func (p *pipeConsumer[TTx]) handle(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		p.t.Errorf("%s: metadata: %v", p.name, err)
		return
	}
	seq := md.Sequence.Stream
	id := m.Headers().Get(jetstream.MsgIDHeader)
	var res sqlonce.Result
	err = retry(ctx, func() error {
		return harness.WithTx(ctx, p.db, harness.Default, func(tx TTx) error {
			var err error
			res, err = p.in.HandleTx(ctx, tx, id, func(ctx context.Context) error {
				return p.apply(ctx, tx, string(m.Data()))
			})
			return err
		})
	})
	if err != nil {
		if ctx.Err() == nil {
			p.failed.Add(1)
			_ = m.Nak()
		}
		return
	}
	switch res.Outcome {
	case sqlonce.FirstRun:
		p.applied.Add(1)
	case sqlonce.AlreadyDone:
		p.already.Add(1)
	}
	if md.NumDelivered > 1 {
		p.mu.Lock()
		p.redelivered[seq] = true
		if w, ok := p.waiting[seq]; ok {
			close(w)
			delete(p.waiting, seq)
		}
		p.mu.Unlock()
	}
	if md.NumDelivered == 1 && seq%pipeLateAck == 0 {
		// Committed, but the ack waits for JetStream to deliver the
		// message again (after AckWait), as when an ack is lost.
		w := make(chan struct{})
		p.mu.Lock()
		if p.redelivered[seq] {
			close(w)
		} else {
			p.waiting[seq] = w
		}
		p.mu.Unlock()
		p.late.Add(1)
		select {
		case <-w:
		case <-ctx.Done():
			return
		}
	}
	_ = m.Ack()
}

// idle reports whether cons has no message left to deliver nor any
// delivered and not acked.
func idle(ctx context.Context, t *testing.T, cons jetstream.Consumer) bool {
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}
