// Package broker_test proves the inbox pattern against a real broker: NATS
// JetStream, with redeliveries forced every way a consumer meets them, and
// the business effects counted in the database.
//
// The broker is NATS with JetStream at SQLONCE_NATS_URL, or
// nats://127.0.0.1:4222. When it does not answer the tests are skipped
// with a message, except under CI=true, where they fail.
package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

func TestPostgres(t *testing.T) { runInbox(t, harness.Postgres) }

func TestMySQL(t *testing.T) { runInbox(t, harness.MySQL) }

func natsURL() string {
	if u := os.Getenv("SQLONCE_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// connect returns a connection to the broker, or skips t (fails it under
// CI) when there is none.
func connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(3*time.Second), nats.MaxReconnects(0))
	if err != nil {
		if testdb.InCI() {
			t.Fatalf("NATS JetStream at %s: %v", natsURL(), err)
		}
		t.Skipf("no NATS JetStream at %s (set SQLONCE_NATS_URL): %v", natsURL(), err)
	}
	return nc
}

const (
	messages = 60
	ackWait  = 700 * time.Millisecond
	workers  = 4
)

// What a message's first delivery does, by the message's number modulo
// behaviours: the ways a consumer meets a redelivery.
const (
	ackLost    = iota // applied and committed, the ack never sent: redelivered after the ack wait
	nak               // refused before any work: redelivered at once
	fnFails           // the work fails and rolls back, then nak
	slowCommit        // the work outlasts the ack wait: redelivered to another worker while its transaction is open
	normal            // applied and acked
	crash             // applied and committed, then the consumer dies holding its unacked batch and a new one starts
	behaviours
)

// stats counts what the consumers saw.
type stats struct {
	first, done, failed, redelivered, crashes, busy atomic.Int64
}

func runInbox[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("EachMessageAppliedOnce", func(t *testing.T) { scenario(t, f, true, false) })
	// Consumers that apply each fetched batch in one transaction with
	// inbox.HandleBatch, meeting the same redeliveries.
	t.Run("BatchConsumerEachMessageAppliedOnce", func(t *testing.T) { scenario(t, f, true, true) })
	// The same consumers writing without the inbox apply redelivered
	// messages again: the redeliveries above are real.
	t.Run("WithoutInboxDuplicates", func(t *testing.T) { scenario(t, f, false, false) })
}

func scenario[TTx any](t *testing.T, f harness.Factory[TTx], useInbox, batched bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc := connect(t)
	defer nc.Close()
	db := f(t, 2*workers+2)
	in, err := inbox.New(db.Driver(), "ledger-writer")
	if err != nil {
		t.Fatal(err)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "SQLONCE_INBOX_" + hex.EncodeToString(suffix)
	subject := "sqlonce.inbox." + hex.EncodeToString(suffix)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream (is JetStream enabled?): %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "ledger-writer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	}); err != nil {
		t.Fatal(err)
	}

	// The producer publishes every message once, and every seventh a
	// second time, as a producer that retried a publish whose ack it
	// lost: two stream messages, one message id.
	published := 0
	for i := range messages {
		copies := 1
		if i%7 == 6 {
			copies = 2
		}
		for range copies {
			msg := nats.NewMsg(subject)
			msg.Header.Set("Message-Id", fmt.Sprintf("msg-%03d", i))
			msg.Header.Set("Seq", fmt.Sprint(i))
			msg.Data = []byte(fmt.Sprint(i))
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
			published++
		}
	}

	var st stats
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var start func()
	start = func() {
		wg.Go(func() {
			consumer := consume[TTx]
			if batched {
				consumer = consumeBatches[TTx]
			}
			crashed, err := consumer(ctx, db, in, useInbox, name, stop, &st)
			if err != nil {
				t.Error(err)
				return
			}
			if crashed {
				start() // the restarted consumer
			}
		})
	}
	for range workers {
		start()
	}

	// Done when every message was applied and the broker has nothing
	// left to deliver or to wait an ack for.
	deadline := time.Now().Add(90 * time.Second)
	for {
		per, err := db.Pool().LedgerCountPerRef(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := js.Consumer(ctx, name, "ledger-writer")
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(per) == messages && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) || t.Failed() {
			close(stop)
			wg.Wait()
			t.Fatalf("not done: %d of %d messages applied, %d pending, %d awaiting ack", len(per), messages, info.NumPending, info.NumAckPending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	per, err := db.Pool().LedgerCountPerRef(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !useInbox {
		var extra int64
		for _, n := range per {
			extra += n - 1
		}
		if extra == 0 {
			t.Fatalf("without the inbox no message was applied twice: the redeliveries did not happen (%v)", &st)
		}
		t.Logf("without the inbox: %d messages, %d extra applications (%v)", messages, extra, &st)
		return
	}
	for i := range messages {
		if n := per[fmt.Sprintf("msg-%03d", i)]; n != 1 {
			t.Errorf("msg-%03d applied %d times, want 1", i, n)
		}
	}
	if got := st.first.Load(); got != messages {
		t.Errorf("%d first runs, want %d", got, messages)
	}
	// Every behaviour happened: without redeliveries the count above
	// proves nothing.
	if st.done.Load() == 0 || st.failed.Load() == 0 || st.redelivered.Load() == 0 || st.crashes.Load() == 0 {
		t.Errorf("a forced redelivery did not happen: %+v", &st)
	}
	t.Logf("%d messages, %d published, %d first runs, %d already done, %d failed attempts, %d redeliveries, %d consumer restarts, %d retries asked by the database",
		messages, published, st.first.Load(), st.done.Load(), st.failed.Load(), st.redelivered.Load(), st.crashes.Load(), st.busy.Load())
}

func (s *stats) String() string {
	return fmt.Sprintf("first=%d done=%d failed=%d redelivered=%d crashes=%d busy=%d",
		s.first.Load(), s.done.Load(), s.failed.Load(), s.redelivered.Load(), s.crashes.Load(), s.busy.Load())
}

var errWorkFailed = errors.New("the work failed")

// consume is one consumer process: a connection of its own, pulling
// batches until stop closes. It returns crashed = true when it died on
// purpose, leaving its batch unacked.
func consume[TTx any](ctx context.Context, db harness.DB[TTx], in *inbox.Inbox[TTx], useInbox bool, stream string, stop chan struct{}, st *stats) (crashed bool, err error) {
	nc, err := nats.Connect(natsURL(), nats.MaxReconnects(0))
	if err != nil {
		return false, err
	}
	defer nc.Close() // a crash closes it with acks outstanding: the broker redelivers
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	cons, err := js.Consumer(ctx, stream, "ledger-writer")
	if err != nil {
		return false, err
	}
	for {
		select {
		case <-stop:
			return false, nil
		default:
		}
		batch, err := cons.Fetch(8, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false, err
		}
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return false, err
			}
			var seq int
			if _, err := fmt.Sscan(msg.Headers().Get("Seq"), &seq); err != nil {
				return false, err
			}
			id := msg.Headers().Get("Message-Id")
			firstDelivery := md.NumDelivered == 1
			if !firstDelivery {
				st.redelivered.Add(1)
			}
			how := normal
			if firstDelivery {
				how = seq % behaviours
			}
			if how == nak {
				if err := msg.Nak(); err != nil {
					return false, err
				}
				continue
			}
			apply := func(ctx context.Context, tx TTx) error {
				if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
					return err
				}
				switch how {
				case fnFails:
					return errWorkFailed
				case slowCommit:
					time.Sleep(ackWait * 3 / 2)
				}
				return nil
			}
			var res sqlonce.Result
			if useInbox {
				res, err = in.Handle(ctx, id, apply)
			} else {
				res.Outcome = sqlonce.FirstRun
				err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error { return apply(ctx, tx) })
			}
			switch {
			case errors.Is(err, errWorkFailed):
				st.failed.Add(1)
				if err := msg.Nak(); err != nil {
					return false, err
				}
				continue
			case sqlonce.IsRetryable(err) && ctx.Err() == nil:
				// The database asked for a retry (on SQLite, a writer
				// starved past the busy timeout while others held the
				// lock through their slow commits): nothing committed, so
				// the consumer does what any consumer does, and has the
				// broker deliver the message again.
				st.busy.Add(1)
				if err := msg.Nak(); err != nil {
					return false, err
				}
				continue
			case err != nil:
				return false, fmt.Errorf("handle %s: %w", id, err)
			}
			if res.FirstRun() {
				st.first.Add(1)
			} else {
				st.done.Add(1)
			}
			switch how {
			case ackLost:
				continue // committed, never acked
			case crash:
				st.crashes.Add(1)
				return true, nil // committed, and the rest of the batch with it unacked
			}
			// Ack after commit. An ack for a delivery the broker has since
			// redelivered (slowCommit) is refused or ignored: harmless, the
			// redelivery finds the message applied.
			_ = msg.Ack()
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
	}
}

// consumeBatches is consume for a consumer that applies each fetched batch
// in one transaction with inbox.HandleBatch. A batch takes the behaviours
// of its messages' first deliveries: a nak'ed message is left out of it,
// a failing one fails (and naks) the whole batch, a slow one delays its
// commit, a lost ack is not sent, and a crash drops every ack of the batch
// after the commit.
// crashOwed holds the messages (stream/id) whose first delivery was to
// crash the batch consumer. A batch that also holds a message whose work
// fails rolls back and crashes nobody; the crash is then owed to the next
// batch holding the message that commits, so that every run sees one.
var crashOwed sync.Map

func consumeBatches[TTx any](ctx context.Context, db harness.DB[TTx], in *inbox.Inbox[TTx], _ bool, stream string, stop chan struct{}, st *stats) (crashed bool, err error) {
	nc, err := nats.Connect(natsURL(), nats.MaxReconnects(0))
	if err != nil {
		return false, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, err
	}
	cons, err := js.Consumer(ctx, stream, "ledger-writer")
	if err != nil {
		return false, err
	}
	for {
		select {
		case <-stop:
			return false, nil
		default:
		}
		batch, err := cons.Fetch(8, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return false, err
		}
		var (
			msgs []jetstream.Msg
			ids  []string
			hows = map[int]bool{}
			skip []bool // ack lost
		)
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return false, err
			}
			var seq int
			if _, err := fmt.Sscan(msg.Headers().Get("Seq"), &seq); err != nil {
				return false, err
			}
			how := normal
			if md.NumDelivered == 1 {
				how = seq % behaviours
			} else {
				st.redelivered.Add(1)
			}
			if how == nak {
				if err := msg.Nak(); err != nil {
					return false, err
				}
				continue
			}
			hows[how] = true
			if how == crash {
				crashOwed.Store(stream+"/"+msg.Headers().Get("Message-Id"), true)
			}
			msgs = append(msgs, msg)
			ids = append(ids, msg.Headers().Get("Message-Id"))
			skip = append(skip, how == ackLost)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
		if len(msgs) == 0 {
			continue
		}
		res, err := in.HandleBatch(ctx, ids, func(ctx context.Context, tx TTx, fresh []string) error {
			for _, id := range fresh {
				if err := db.Tx(tx).LedgerInsert(ctx, id, 1); err != nil {
					return err
				}
			}
			if hows[fnFails] {
				return errWorkFailed
			}
			if hows[slowCommit] {
				time.Sleep(ackWait * 3 / 2)
			}
			return nil
		})
		switch {
		case errors.Is(err, errWorkFailed), sqlonce.IsRetryable(err) && ctx.Err() == nil:
			if errors.Is(err, errWorkFailed) {
				st.failed.Add(1)
			} else {
				st.busy.Add(1)
			}
			for _, msg := range msgs {
				if err := msg.Nak(); err != nil {
					return false, err
				}
			}
			continue
		case err != nil:
			return false, fmt.Errorf("handle batch %v: %w", ids, err)
		}
		for _, r := range res {
			if r.FirstRun() {
				st.first.Add(1)
			} else {
				st.done.Add(1)
			}
		}
		owed := false
		for _, id := range ids {
			if _, ok := crashOwed.LoadAndDelete(stream + "/" + id); ok {
				owed = true
			}
		}
		if owed {
			st.crashes.Add(1)
			return true, nil // committed, the whole batch unacked
		}
		for i, msg := range msgs {
			if !skip[i] {
				_ = msg.Ack()
			}
		}
	}
}
