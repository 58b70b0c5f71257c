package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// outboxRecorder is the Publisher of the outbox cases: it stands for the user's
// code in front of a broker. It records every message it confirms, fails
// those fail says to fail, and counts a publish of a message, or of a
// key, that begins while another of the same is in flight.
type outboxRecorder struct {
	mu        sync.Mutex
	published []outbox.Message
	calls     map[string]int // publishes per id, failed ones too
	inFlight  map[string]bool
	keys      map[string]bool
	overlaps  []string
	changed   chan struct{}
	fail      func(m outbox.Message, call int) error
	hold      func(ctx context.Context, m outbox.Message)
}

func newOutboxRecorder() *outboxRecorder {
	return &outboxRecorder{calls: map[string]int{}, inFlight: map[string]bool{}, keys: map[string]bool{}, changed: make(chan struct{}, 1)}
}

func (r *outboxRecorder) Publish(ctx context.Context, m outbox.Message) error {
	r.mu.Lock()
	r.calls[m.ID]++
	call := r.calls[m.ID]
	if r.inFlight[m.ID] {
		r.overlaps = append(r.overlaps, "id "+m.ID)
	}
	if m.Key != "" && r.keys[m.Key] {
		r.overlaps = append(r.overlaps, "key "+m.Key)
	}
	r.inFlight[m.ID] = true
	if m.Key != "" {
		r.keys[m.Key] = true
	}
	fail, hold := r.fail, r.hold
	r.mu.Unlock()
	if hold != nil {
		hold(ctx, m)
	}
	var err error
	if fail != nil {
		err = fail(m, call)
	}
	r.mu.Lock()
	delete(r.inFlight, m.ID)
	if m.Key != "" {
		delete(r.keys, m.Key)
	}
	if err == nil {
		r.published = append(r.published, m)
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return err
}

// setFail sets the failures, safely while relays run.
func (r *outboxRecorder) setFail(fail func(m outbox.Message, call int) error) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

// count returns how many times id was confirmed, and how many publishes
// of it were made.
func (r *outboxRecorder) count(id string) (confirmed, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.published {
		if m.ID == id {
			confirmed++
		}
	}
	return confirmed, r.calls[id]
}

func (r *outboxRecorder) snapshot() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.published)
}

// waitOutbox waits until cond holds, re-checking after each publish and every
// few milliseconds; it fails t when ctx ends first.
func waitOutbox(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// startRelay runs s.Relay in a goroutine and returns the function that
// stops it and checks that it returned its context's error.
func startRelay[TTx any](ctx context.Context, t testing.TB, s *outbox.Store[TTx], p outbox.Publisher, opts ...outbox.RelayOption) (stop func()) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Relay(rctx, p, opts...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Relay returned %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// enqueue enqueues m in a transaction of its own, with an order row
// beside it, and commits (rolls back when rollback is set, after the
// enqueue succeeded); it retries while sqlonce.IsRetryable.
func outboxEnqueue[TTx any](ctx context.Context, db harness.DB[TTx], s *outbox.Store[TTx], m outbox.Message, rollback bool) (sqlonce.Result, error) {
	var res sqlonce.Result
	errRollback := errors.New("rolled back on purpose")
	_, err := retryTx(ctx, db, harness.Default, func(tx TTx) error {
		code := fmt.Sprintf("ord-%s-%d", m.ID, orderSeq.Add(1))
		if _, err := db.Tx(tx).OrderInsert(ctx, code, code, 1); err != nil {
			return err
		}
		var err error
		if res, err = s.Enqueue(ctx, tx, m); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if errors.Is(err, errRollback) {
		err = nil
	}
	return res, err
}

// orderSeq numbers the orders enqueue writes, whose codes are unique.
var orderSeq atomic.Int64

// outboxEvents collects the outbox events an Observer receives.
type outboxEvents struct {
	mu     sync.Mutex
	events []sqlonce.Event
}

func (l *outboxEvents) Observe(_ context.Context, e sqlonce.Event) {
	if e.Strategy != "outbox" {
		return
	}
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// find returns the events of operation op with status st.
func (l *outboxEvents) find(op string, st sqlonce.EventStatus) []sqlonce.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sqlonce.Event
	for _, e := range l.events {
		if e.Operation == op && e.Status == st {
			out = append(out, e)
		}
	}
	return out
}

func outboxMsg(id, key string, seq int) outbox.Message {
	return outbox.Message{
		ID: id, Topic: "orders.placed", Key: key,
		Payload: []byte(strconv.Itoa(seq)),
		Headers: map[string]string{"content-type": "text/plain", "seq": strconv.Itoa(seq)},
	}
}

// fast are the relay options of the cases: a short poll, so that a case
// waits little where no notification wakes the relay.
func fastRelay(opts ...outbox.RelayOption) []outbox.RelayOption {
	return append([]outbox.RelayOption{outbox.WithPollInterval(10 * time.Millisecond)}, opts...)
}

func runOutbox[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("Arguments", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		if _, err := outbox.New[TTx](nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("New(nil): %v, want ErrInvalidArgument", err)
		}
		s, err := outbox.New(db.Driver())
		must(t, err)
		long := strings.Repeat("k", sqlonce.MaxKeyLen+1)
		for _, c := range []struct {
			name string
			m    outbox.Message
			want error
		}{
			{"empty id", outbox.Message{Topic: "t"}, sqlonce.ErrInvalidKey},
			{"long id", outbox.Message{ID: long, Topic: "t"}, sqlonce.ErrInvalidKey},
			{"empty topic", outbox.Message{ID: "a"}, sqlonce.ErrInvalidArgument},
			{"long topic", outbox.Message{ID: "a", Topic: long}, sqlonce.ErrInvalidArgument},
			{"long key", outbox.Message{ID: "a", Topic: "t", Key: long}, sqlonce.ErrInvalidKey},
			{"NUL key", outbox.Message{ID: "a", Topic: "t", Key: "a\x00"}, sqlonce.ErrInvalidKey},
			{"empty header name", outbox.Message{ID: "a", Topic: "t", Headers: map[string]string{"": "v"}}, sqlonce.ErrInvalidArgument},
		} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := s.Enqueue(ctx, tx, c.m)
				return err
			})
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		for name, tx := range nilTxs[TTx]() {
			if _, err := s.Enqueue(ctx, tx, outboxMsg("a", "", 1)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("Enqueue with a %s tx: %v, want ErrInvalidArgument", name, err)
			}
		}
		p := newOutboxRecorder()
		for name, opts := range map[string][]outbox.RelayOption{
			"nil option":        {nil},
			"batch -1":          {outbox.WithBatchSize(-1)},
			"batch too big":     {outbox.WithBatchSize(outbox.MaxBatchSize + 1)},
			"poll 1µs":          {outbox.WithPollInterval(time.Microsecond)},
			"lease 1ms":         {outbox.WithLease(time.Millisecond)},
			"concurrency -1":    {outbox.WithConcurrency(-1)},
			"attempts -1":       {outbox.WithRetry(-1, 0, 0)},
			"max under backoff": {outbox.WithRetry(3, time.Second, time.Millisecond)},
			"retention -1":      {outbox.WithRetention(-time.Second)},
		} {
			if err := s.Relay(ctx, p, opts...); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("Relay with %s: %v, want ErrInvalidArgument", name, err)
			}
		}
		if err := s.Relay(ctx, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("Relay(nil): %v, want ErrInvalidArgument", err)
		}
		if err := s.Relay(ctx, outbox.PublisherFunc(nil)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("Relay(PublisherFunc(nil)): %v, want ErrInvalidArgument", err)
		}
		if _, err := s.List(ctx, outbox.State(9), 0, 0); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("List of state 9: %v, want ErrInvalidArgument", err)
		}
		if _, err := s.Get(ctx, "none"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Errorf("Get of no message: %v, want ErrNotFound", err)
		}
		st, err := s.Stats(ctx)
		must(t, err)
		if st != (outbox.Stats{}) {
			t.Errorf("Stats of an empty outbox: %+v", st)
		}
	})

	t.Run("CommitRollback", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := outbox.New(db.Driver())
		must(t, err)
		res, err := outboxEnqueue(ctx, db, s, outboxMsg("kept", "k", 1), false)
		wantOutcome(t, "committed", res, err, sqlonce.FirstRun, nil)
		res, err = outboxEnqueue(ctx, db, s, outboxMsg("dropped", "k", 2), true)
		wantOutcome(t, "rolled back", res, err, sqlonce.FirstRun, nil)
		res, err = outboxEnqueue(ctx, db, s, outboxMsg("kept-2", "k", 3), false)
		wantOutcome(t, "committed", res, err, sqlonce.FirstRun, nil)
		if _, err := s.Get(ctx, "dropped"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Fatalf("Get of a rolled-back message: %v, want ErrNotFound", err)
		}
		inf, err := s.Get(ctx, "kept")
		must(t, err)
		if inf.State != outbox.Pending || inf.Topic != "orders.placed" || string(inf.Payload) != "1" || inf.Headers["seq"] != "1" || inf.Key != "k" {
			t.Fatalf("Get: %+v", inf)
		}
		st, err := s.Stats(ctx)
		must(t, err)
		if st.Pending != 2 || st.OldestPending.IsZero() {
			t.Fatalf("Stats before the relay: %+v, want 2 pending", st)
		}

		p := newOutboxRecorder()
		stop := startRelay(ctx, t, s, p, fastRelay()...)
		waitOutbox(ctx, t, "2 messages published", func() bool { return len(p.snapshot()) >= 2 })
		stop()
		var ids []string
		for _, m := range p.snapshot() {
			ids = append(ids, m.ID)
		}
		if !slices.Equal(ids, []string{"kept", "kept-2"}) {
			t.Fatalf("published %v, want [kept kept-2]", ids)
		}
		if got := p.snapshot()[0]; got.Headers["content-type"] != "text/plain" || string(got.Payload) != "1" || got.Topic != "orders.placed" {
			t.Fatalf("published %+v", got)
		}
		st, err = s.Stats(ctx)
		must(t, err)
		if st.Pending != 0 || st.Sent != 2 || st.Parked != 0 {
			t.Fatalf("Stats after the relay: %+v, want 2 sent", st)
		}
		inf, err = s.Get(ctx, "kept")
		must(t, err)
		if inf.State != outbox.Sent || inf.Sent.IsZero() {
			t.Fatalf("Get after the relay: %+v", inf)
		}
		list, err := s.List(ctx, outbox.Sent, 0, 1)
		must(t, err)
		if len(list) != 1 || list[0].ID != "kept" {
			t.Fatalf("List page 1: %+v", list)
		}
		list, err = s.List(ctx, outbox.Sent, list[0].Seq, 0)
		must(t, err)
		if len(list) != 1 || list[0].ID != "kept-2" {
			t.Fatalf("List page 2: %+v", list)
		}
	})

	t.Run("Duplicates", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := outbox.New(db.Driver())
		must(t, err)
		m := outboxMsg("dup", "k", 1)
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			res, err := s.Enqueue(ctx, tx, m)
			wantOutcome(t, "first", res, err, sqlonce.FirstRun, nil)
			res, err = s.Enqueue(ctx, tx, m)
			wantOutcome(t, "same tx", res, err, sqlonce.AlreadyDone, nil)
			return nil
		}))
		res, err := outboxEnqueue(ctx, db, s, m, false)
		wantOutcome(t, "retried producer", res, err, sqlonce.AlreadyDone, nil)
		for name, other := range map[string]outbox.Message{
			"payload": {ID: "dup", Topic: m.Topic, Key: m.Key, Payload: []byte("2"), Headers: m.Headers},
			"topic":   {ID: "dup", Topic: "other", Key: m.Key, Payload: m.Payload, Headers: m.Headers},
			"key":     {ID: "dup", Topic: m.Topic, Key: "other", Payload: m.Payload, Headers: m.Headers},
			"headers": {ID: "dup", Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: map[string]string{"seq": "1"}},
		} {
			if _, err := outboxEnqueue(ctx, db, s, other, false); !errors.Is(err, sqlonce.ErrKeyReuse) {
				t.Errorf("same id, other %s: %v, want ErrKeyReuse", name, err)
			}
		}

		// Racers enqueue the same message at once: one inserts it.
		var c counter
		errs := race(Racers, func(i int) error {
			res, err := outboxEnqueue(ctx, db, s, outboxMsg("raced", "", 7), false)
			c.add(res)
			return err
		})
		noErrors(t, errs)
		if t.Failed() {
			t.FailNow()
		}
		if c.first.Load() != 1 || c.done.Load() != int64(Racers-1) {
			t.Fatalf("racers: %v, want first=1 done=%d", &c, Racers-1)
		}
		st, err := s.Stats(ctx)
		must(t, err)
		if st.Pending != 2 {
			t.Fatalf("Stats: %+v, want 2 pending", st)
		}
	})

	t.Run("RelaysRace", func(t *testing.T) {
		ctx := ctxT(t)
		const (
			relays  = 4
			keys    = 6
			perKey  = 12
			unkeyed = 10
		)
		db := f(t, 32)
		s, err := outbox.New(db.Driver())
		must(t, err)
		p := newOutboxRecorder()
		for range relays {
			startRelay(ctx, t, s, p, fastRelay(outbox.WithBatchSize(4), outbox.WithConcurrency(3))...)
		}
		// One producer per key, enqueuing its messages in order while the
		// relays run; a producer of unkeyed messages beside them.
		errs := race(keys+1, func(i int) error {
			if i == keys {
				for j := range unkeyed {
					if _, err := outboxEnqueue(ctx, db, s, outboxMsg(fmt.Sprintf("u-%d", j), "", j), false); err != nil {
						return err
					}
				}
				return nil
			}
			for j := range perKey {
				if _, err := outboxEnqueue(ctx, db, s, outboxMsg(fmt.Sprintf("k%d-%d", i, j), fmt.Sprintf("key-%d", i), j), false); err != nil {
					return err
				}
			}
			return nil
		})
		noErrors(t, errs)
		if t.Failed() {
			t.FailNow()
		}
		total := keys*perKey + unkeyed
		waitOutbox(ctx, t, "every message published", func() bool {
			seen := map[string]bool{}
			for _, m := range p.snapshot() {
				seen[m.ID] = true
			}
			return len(seen) == total
		})
		waitOutbox(ctx, t, "every message marked sent", func() bool {
			st, err := s.Stats(ctx)
			must(t, err)
			return st.Sent == int64(total)
		})
		last := map[string]int{}
		count := map[string]int{}
		for _, m := range p.snapshot() {
			count[m.ID]++
			if m.Key == "" {
				continue
			}
			seq, _ := strconv.Atoi(string(m.Payload))
			if prev, ok := last[m.Key]; ok && seq <= prev {
				t.Errorf("key %s: message %d published after %d", m.Key, seq, prev)
			}
			last[m.Key] = seq
		}
		for id, n := range count {
			if n != 1 {
				t.Errorf("message %s published %d times", id, n)
			}
		}
		p.mu.Lock()
		if len(p.overlaps) > 0 {
			t.Errorf("publishes overlapped: %v", p.overlaps)
		}
		p.mu.Unlock()
		st, err := s.Stats(ctx)
		must(t, err)
		if st.Pending != 0 || st.Parked != 0 || st.Sent != int64(total) {
			t.Fatalf("Stats: %+v, want %d sent", st, total)
		}
	})

	t.Run("SerializedProducersCommitOrder", func(t *testing.T) {
		// Producers of one key that serialize on the entity's row (an
		// UPDATE before Enqueue) enqueue in the order they commit: the
		// messages of a key reach the Publisher in the order of the row's
		// versions, with relays publishing while producers race.
		ctx := ctxT(t)
		const (
			keys      = 3
			producers = 8
			each      = 6
		)
		db := f(t, 32)
		s, err := outbox.New(db.Driver())
		must(t, err)
		for k := range keys {
			code := fmt.Sprintf("entity-%d", k)
			_, err := retryTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := db.Tx(tx).OrderInsert(ctx, code, code, 0)
				return err
			})
			must(t, err)
		}
		p := newOutboxRecorder()
		for range 2 {
			startRelay(ctx, t, s, p, fastRelay(outbox.WithConcurrency(4))...)
		}
		errs := race(producers, func(i int) error {
			for j := range each {
				k := (i + j) % keys
				code := fmt.Sprintf("entity-%d", k)
				_, err := retryTx(ctx, db, harness.Default, func(tx TTx) error {
					// The entity's row, locked by the update until COMMIT.
					if err := db.TxExec(ctx, tx, "UPDATE orders SET amount = amount + 1 WHERE code = '"+code+"'"); err != nil {
						return err
					}
					o, err := db.Tx(tx).OrderGetByCode(ctx, code)
					if err != nil {
						return err
					}
					m := outboxMsg(fmt.Sprintf("%s-v%d", code, o.Amount), code, int(o.Amount))
					_, err = s.Enqueue(ctx, tx, m)
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		noErrors(t, errs)
		if t.Failed() {
			t.FailNow()
		}
		total := producers * each
		waitOutbox(ctx, t, "every message marked sent", func() bool {
			st, err := s.Stats(ctx)
			must(t, err)
			return st.Sent == int64(total)
		})
		got := map[string][]int{}
		for _, m := range p.snapshot() {
			v, _ := strconv.Atoi(string(m.Payload))
			got[m.Key] = append(got[m.Key], v)
		}
		n := 0
		for k := range keys {
			key := fmt.Sprintf("entity-%d", k)
			vs := got[key]
			n += len(vs)
			for i, v := range vs {
				if v != i+1 {
					t.Fatalf("key %s published versions %v, want 1, 2, 3... (the commit order)", key, vs)
				}
			}
		}
		if n != total {
			t.Fatalf("%d messages published, want %d", n, total)
		}
	})

	t.Run("ParkRedrive", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		log := &outboxEvents{}
		s, err := outbox.New(sqlonce.Observe(db.Driver(), log))
		must(t, err)
		p := newOutboxRecorder()
		p.setFail(func(m outbox.Message, call int) error {
			switch {
			case m.ID == "bad":
				return fmt.Errorf("broker refused %s (call %d)", m.ID, call)
			case m.ID == "poison":
				return outbox.Permanent(errors.New("schema mismatch"))
			}
			return nil
		})
		for i, m := range []outbox.Message{outboxMsg("bad", "k", 1), outboxMsg("after-bad", "k", 2), outboxMsg("poison", "p", 1)} {
			res, err := outboxEnqueue(ctx, db, s, m, false)
			wantOutcome(t, fmt.Sprint("enqueue ", i), res, err, sqlonce.FirstRun, nil)
		}
		stop := startRelay(ctx, t, s, p, fastRelay(outbox.WithRetry(3, time.Millisecond, 4*time.Millisecond))...)
		waitOutbox(ctx, t, "2 messages parked", func() bool { return len(log.find("Park", sqlonce.EventError)) == 2 })
		// A message of another key enqueued now leaves while k is held.
		res, err := outboxEnqueue(ctx, db, s, outboxMsg("other", "o", 1), false)
		wantOutcome(t, "other", res, err, sqlonce.FirstRun, nil)
		waitOutbox(ctx, t, "other sent", func() bool {
			inf, err := s.Get(ctx, "other")
			must(t, err)
			return inf.State == outbox.Sent
		})
		if n, calls := p.count("bad"); n != 0 || calls != 3 {
			t.Fatalf("bad: confirmed %d, published %d times, want 0 and 3", n, calls)
		}
		if n, calls := p.count("poison"); n != 0 || calls != 1 {
			t.Fatalf("poison: confirmed %d, published %d times, want 0 and 1", n, calls)
		}
		if _, calls := p.count("after-bad"); calls != 0 {
			t.Fatalf("after-bad published %d times while bad, before it, is parked", calls)
		}
		inf, err := s.Get(ctx, "bad")
		must(t, err)
		if inf.State != outbox.Parked || inf.Attempts != 3 || !strings.Contains(inf.LastError, "broker refused bad") {
			t.Fatalf("Get(bad): state %v attempts %d last error %q", inf.State, inf.Attempts, inf.LastError)
		}
		st, err := s.Stats(ctx)
		must(t, err)
		if st.Parked != 2 || st.Pending != 1 || st.Sent != 1 {
			t.Fatalf("Stats: %+v, want 2 parked, 1 pending, 1 sent", st)
		}
		if list, err := s.List(ctx, outbox.Parked, 0, 0); err != nil || len(list) != 2 {
			t.Fatalf("List parked: %v, %v", list, err)
		}
		var attempts []int
		for _, e := range log.find("Publish", sqlonce.EventError) {
			attempts = append(attempts, e.Attempts)
		}
		slices.Sort(attempts)
		if !slices.Equal(attempts, []int{1, 1, 2, 3}) {
			t.Errorf("failed publishes reported with attempts %v, want [1 1 2 3]", attempts)
		}

		// Redrive: bad goes, then after-bad, in order.
		p.setFail(nil)
		must(t, s.Redrive(ctx, "bad"))
		waitOutbox(ctx, t, "after-bad published", func() bool { n, _ := p.count("after-bad"); return n == 1 })
		var order []string
		for _, m := range p.snapshot() {
			if m.Key == "k" {
				order = append(order, m.ID)
			}
		}
		if !slices.Equal(order, []string{"bad", "after-bad"}) {
			t.Fatalf("key k published %v, want [bad after-bad]", order)
		}
		stop()
		if err := s.Redrive(ctx, "bad"); !errors.Is(err, outbox.ErrNotParked) {
			t.Errorf("Redrive of a sent message: %v, want ErrNotParked", err)
		}
		if err := s.Redrive(ctx, "none"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Errorf("Redrive of no message: %v, want ErrNotFound", err)
		}
		// Forget the poison message: gone, its id free again.
		must(t, s.Forget(ctx, "poison"))
		if _, err := s.Get(ctx, "poison"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Errorf("Get after Forget: %v, want ErrNotFound", err)
		}
		if err := s.Forget(ctx, "poison"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Errorf("Forget again: %v, want ErrNotFound", err)
		}
		res, err = outboxEnqueue(ctx, db, s, outboxMsg("poison", "p", 2), false)
		wantOutcome(t, "poison enqueued again", res, err, sqlonce.FirstRun, nil)
	})

	t.Run("PublisherPanics", func(t *testing.T) {
		// A panic in the Publisher is a failed publish, not a crash: the
		// relay goes on, backs the message off and parks it in the end.
		ctx := ctxT(t)
		db := f(t, 0)
		log := &outboxEvents{}
		s, err := outbox.New(sqlonce.Observe(db.Driver(), log))
		must(t, err)
		rec := newOutboxRecorder()
		var mu sync.Mutex
		calls := map[string]int{}
		p := outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
			mu.Lock()
			calls[m.ID]++
			call := calls[m.ID]
			mu.Unlock()
			switch {
			case m.ID == "boom":
				panic(fmt.Sprintf("publisher bug on %s, call %d", m.ID, call))
			case m.ID == "once" && call == 1:
				var nilMap map[string]int
				nilMap[m.ID]++ // a runtime error: assignment to entry in nil map
			}
			return rec.Publish(ctx, m)
		})
		for i, m := range []outbox.Message{outboxMsg("boom", "k", 1), outboxMsg("after-boom", "k", 2), outboxMsg("once", "o", 1), outboxMsg("fine", "f", 1)} {
			res, err := outboxEnqueue(ctx, db, s, m, false)
			wantOutcome(t, fmt.Sprint("enqueue ", i), res, err, sqlonce.FirstRun, nil)
		}
		stop := startRelay(ctx, t, s, p, fastRelay(outbox.WithRetry(3, time.Millisecond, 4*time.Millisecond))...)
		waitOutbox(ctx, t, "boom parked", func() bool { return len(log.find("Park", sqlonce.EventError)) == 1 })
		waitOutbox(ctx, t, "once and fine sent", func() bool {
			a, _ := rec.count("once")
			b, _ := rec.count("fine")
			return a == 1 && b == 1
		})
		// The relay still runs: a message enqueued now leaves.
		res, err := outboxEnqueue(ctx, db, s, outboxMsg("later", "l", 1), false)
		wantOutcome(t, "later", res, err, sqlonce.FirstRun, nil)
		waitOutbox(ctx, t, "later sent", func() bool {
			inf, err := s.Get(ctx, "later")
			must(t, err)
			return inf.State == outbox.Sent
		})
		stop()

		inf, err := s.Get(ctx, "boom")
		must(t, err)
		if inf.State != outbox.Parked || inf.Attempts != 3 || !strings.HasPrefix(inf.LastError, "panic: publisher bug on boom") {
			t.Fatalf("Get(boom): state %v attempts %d last error %q, want parked after 3 attempts with the panic", inf.State, inf.Attempts, inf.LastError)
		}
		if _, n := rec.count("after-boom"); n != 0 {
			t.Fatalf("after-boom published %d times while boom, before it, is parked", n)
		}
		inf, err = s.Get(ctx, "once")
		must(t, err)
		if inf.State != outbox.Sent {
			t.Fatalf("Get(once): state %v, want sent after the panic of its first publish", inf.State)
		}
		mu.Lock()
		nBoom, nOnce := calls["boom"], calls["once"]
		mu.Unlock()
		if nBoom != 3 || nOnce != 2 {
			t.Fatalf("published boom %d times and once %d times, want 3 and 2", nBoom, nOnce)
		}
		var boom, once []int
		for _, e := range log.find("Publish", sqlonce.EventError) {
			switch msg := fmt.Sprint(e.Err); {
			case strings.HasPrefix(msg, "panic: publisher bug on boom"):
				boom = append(boom, e.Attempts)
			case strings.HasPrefix(msg, "panic: ") && strings.Contains(msg, "nil map"):
				once = append(once, e.Attempts)
			default:
				t.Errorf("Publish event with error %v, want a panic's", e.Err)
			}
		}
		slices.Sort(boom)
		if !slices.Equal(boom, []int{1, 2, 3}) || !slices.Equal(once, []int{1}) {
			t.Errorf("failed publishes reported with attempts boom %v once %v, want [1 2 3] and [1]", boom, once)
		}
		if park := log.find("Park", sqlonce.EventError)[0]; !strings.Contains(fmt.Sprint(park.Err), "panic: publisher bug on boom") {
			t.Errorf("Park event: %v, want the panic", park.Err)
		}
	})

	t.Run("LeaseLost", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		logA := &outboxEvents{}
		a, err := outbox.New(sqlonce.Observe(db.Driver(), logA))
		must(t, err)
		b, err := outbox.New(db.Driver())
		must(t, err)
		res, err := outboxEnqueue(ctx, db, a, outboxMsg("slow", "k", 1), false)
		wantOutcome(t, "enqueue", res, err, sqlonce.FirstRun, nil)
		res, err = outboxEnqueue(ctx, db, a, outboxMsg("next", "k", 2), false)
		wantOutcome(t, "enqueue", res, err, sqlonce.FirstRun, nil)

		// Relay A stalls in its publish of slow, past its lease and its
		// publish's deadline, and then reports it confirmed.
		stalled, release := make(chan struct{}), make(chan struct{})
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		pa := newOutboxRecorder()
		pa.hold = func(ctx context.Context, m outbox.Message) {
			close(stalled)
			<-ctx.Done() // the deadline four fifths into the lease
			<-release
		}
		lease := outbox.WithLease(300 * time.Millisecond)
		startRelay(ctx, t, a, pa, fastRelay(lease)...)
		t.Cleanup(free) // before A's stop, registered earlier, runs
		<-stalled
		// Relay B takes slow over once A's lease lapsed, and goes on to
		// the next message of its key.
		pb := newOutboxRecorder()
		startRelay(ctx, t, b, pb, fastRelay(lease)...)
		waitOutbox(ctx, t, "B published slow and next", func() bool { return len(pb.snapshot()) == 2 })
		if ids := []string{pb.snapshot()[0].ID, pb.snapshot()[1].ID}; !slices.Equal(ids, []string{"slow", "next"}) {
			t.Fatalf("B published %v, want [slow next]", ids)
		}
		free()
		waitOutbox(ctx, t, "A's mark fenced", func() bool { return len(logA.find("LeaseLost", sqlonce.EventLeaseLost)) == 1 })
		if e := logA.find("LeaseLost", sqlonce.EventLeaseLost)[0]; e.Rows != 1 || !errors.Is(e.Err, sqlonce.ErrLeaseLost) {
			t.Fatalf("LeaseLost event: rows %d err %v", e.Rows, e.Err)
		}
		inf, err := a.Get(ctx, "slow")
		must(t, err)
		if inf.State != outbox.Sent {
			t.Fatalf("slow is %v, want sent", inf.State)
		}
		if n, _ := pa.count("slow"); n != 1 {
			t.Fatalf("A confirmed slow %d times, want 1", n)
		}
	})

	t.Run("ForgetLeased", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		log := &outboxEvents{}
		s, err := outbox.New(sqlonce.Observe(db.Driver(), log))
		must(t, err)
		res, err := outboxEnqueue(ctx, db, s, outboxMsg("held", "k", 1), false)
		wantOutcome(t, "enqueue", res, err, sqlonce.FirstRun, nil)
		// The relay holds the message for a minute, its publish stalled.
		stalled, release := make(chan struct{}), make(chan struct{})
		var releaseOnce sync.Once
		free := func() { releaseOnce.Do(func() { close(release) }) }
		p := newOutboxRecorder()
		p.hold = func(ctx context.Context, m outbox.Message) {
			close(stalled)
			<-release
		}
		startRelay(ctx, t, s, p, fastRelay(outbox.WithLease(time.Minute))...)
		t.Cleanup(free)
		<-stalled
		inf, err := s.Get(ctx, "held")
		must(t, err)
		if !inf.Leased || inf.State != outbox.Pending {
			t.Fatalf("Get while published: leased %v, state %v", inf.Leased, inf.State)
		}
		if err := s.Forget(ctx, "held"); !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("Forget of a leased message: %v, want ErrInProgress", err)
		}
		must(t, s.Forget(ctx, "held", outbox.ForgetLeased()))
		free()
		// The relay's mark finds the message gone: fenced, reported.
		waitOutbox(ctx, t, "the mark fenced", func() bool { return len(log.find("LeaseLost", sqlonce.EventLeaseLost)) == 1 })
		if _, err := s.Get(ctx, "held"); !errors.Is(err, sqlonce.ErrNotFound) {
			t.Fatalf("Get after Forget: %v, want ErrNotFound", err)
		}
	})

	t.Run("Purge", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		log := &outboxEvents{}
		s, err := outbox.New(sqlonce.Observe(db.Driver(), log))
		must(t, err)
		t0 := clockBase()
		res, err := outboxEnqueue(at(ctx, t0, 0), db, s, outboxMsg("old", "k", 1), false)
		wantOutcome(t, "enqueue", res, err, sqlonce.FirstRun, nil)
		p := newOutboxRecorder()
		stop := startRelay(at(ctx, t0, time.Second), t, s, p, fastRelay()...)
		waitOutbox(ctx, t, "old sent", func() bool {
			st, err := s.Stats(ctx)
			must(t, err)
			return st.Sent == 1
		})
		stop()

		// Each relay purges when it starts: at t0+30m, with a retention of
		// an hour, it keeps old; at t0+2h it purges it.
		purges := func() int { return len(log.find("Purge", sqlonce.EventOK)) }
		for _, c := range []struct {
			at   time.Duration
			kept bool
		}{{30 * time.Minute, true}, {2 * time.Hour, false}} {
			before := purges()
			stop := startRelay(at(ctx, t0, c.at), t, s, p, fastRelay(outbox.WithRetention(time.Hour))...)
			waitOutbox(ctx, t, "a purge", func() bool { return purges() > before })
			stop()
			_, err := s.Get(ctx, "old")
			if c.kept && err != nil || !c.kept && !errors.Is(err, sqlonce.ErrNotFound) {
				t.Fatalf("at t0+%v: Get(old): %v, want kept %v", c.at, err, c.kept)
			}
		}

		// A retention of 0 purges a message once it is sent.
		res, err = outboxEnqueue(ctx, db, s, outboxMsg("now", "k", 2), false)
		wantOutcome(t, "enqueue", res, err, sqlonce.FirstRun, nil)
		stop = startRelay(ctx, t, s, p, fastRelay(outbox.WithRetention(0))...)
		waitOutbox(ctx, t, "now published", func() bool { n, _ := p.count("now"); return n == 1 })
		waitOutbox(ctx, t, "now purged", func() bool {
			_, err := s.Get(ctx, "now")
			return errors.Is(err, sqlonce.ErrNotFound)
		})
		stop()
		st, err := s.Stats(ctx)
		must(t, err)
		if st != (outbox.Stats{}) {
			t.Fatalf("Stats: %+v, want an empty outbox", st)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := outbox.New(db.Driver())
		must(t, err)
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := s.Relay(dctx, newOutboxRecorder()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Relay returned %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("DrainsOneKeyWithoutPolling", func(t *testing.T) {
		// A claim returns at most one message per key: a backlog of one
		// key drains one message a round. The relay claims again at once
		// after a round that claimed something; were it to wait for its
		// poll (an hour here) after a short batch, the case's context
		// would end first. Everything is enqueued before the relay starts,
		// so no notification (PostgreSQL) wakes it between rounds.
		ctx := ctxT(t)
		db := f(t, 0)
		s, err := outbox.New(db.Driver())
		must(t, err)
		const n = 50
		want := make([]string, n)
		for i := range n {
			want[i] = fmt.Sprint("one-", i)
			res, err := outboxEnqueue(ctx, db, s, outboxMsg(want[i], "one", i), false)
			wantOutcome(t, want[i], res, err, sqlonce.FirstRun, nil)
		}
		p := newOutboxRecorder()
		stop := startRelay(ctx, t, s, p, outbox.WithPollInterval(time.Hour))
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		waitOutbox(wctx, t, fmt.Sprint(n, " messages of one key published"), func() bool { return len(p.snapshot()) >= n })
		stop()
		var ids []string
		for _, m := range p.snapshot() {
			ids = append(ids, m.ID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("published %v, want %v", ids, want)
		}
		st, err := s.Stats(ctx)
		must(t, err)
		if st.Pending != 0 || st.Sent != n {
			t.Fatalf("Stats: %+v, want %d sent", st, n)
		}
	})

	t.Run("WithoutNotify", func(t *testing.T) {
		// A Store made WithoutNotify enqueues without waking the relays
		// (PostgreSQL's NOTIFY, which serializes the notifying commits);
		// its messages are published at the relays' poll. The default
		// Store notifies. A connection of the case's own listens on the
		// channel; each enqueue's transaction sends a sentinel after it,
		// delivered after the enqueue's notification if there is one
		// (in order, at COMMIT), and its backend's pid tells its
		// notifications from those of other cases sharing the database.
		ctx := ctxT(t)
		db := f(t, 0)
		quiet, err := outbox.New(db.Driver(), outbox.WithoutNotify())
		must(t, err)
		loud, err := outbox.New(db.Driver())
		must(t, err)
		if _, err := outbox.New(db.Driver(), outbox.WithoutNotify(), nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("New with a nil option: %v, want ErrInvalidArgument", err)
		}
		var conn *pgx.Conn
		if db.Dialect() == "postgres" && outboxCanListen(ctx, t, db) {
			conn, err = pgx.Connect(ctx, db.DSN())
			must(t, err)
			t.Cleanup(func() { conn.Close(context.Background()) })
			_, err = conn.Exec(ctx, "LISTEN "+driver.OutboxChannel)
			must(t, err)
		}
		// enqueue enqueues m through s and returns how many notifications
		// of the channel its transaction sent (-1 where none are read).
		enqueue := func(s *outbox.Store[TTx], m outbox.Message) int {
			t.Helper()
			tx, err := db.Begin(ctx, harness.Default)
			must(t, err)
			var pid int64
			if conn != nil {
				pid, err = db.ConnID(ctx, tx)
				must(t, err)
			}
			res, err := s.Enqueue(ctx, tx, m)
			wantOutcome(t, m.ID, res, err, sqlonce.FirstRun, nil)
			if conn != nil {
				must(t, db.TxExec(ctx, tx, fmt.Sprintf("SELECT pg_notify('%s', 'sentinel-%s')", driver.OutboxChannel, m.ID)))
			}
			must(t, db.Commit(ctx, tx))
			if conn == nil {
				return -1
			}
			n := 0
			for {
				nf, err := conn.WaitForNotification(ctx)
				must(t, err)
				if nf.Channel != driver.OutboxChannel || int64(nf.PID) != pid {
					continue // another case's, or another transaction's
				}
				if nf.Payload == "sentinel-"+m.ID {
					return n
				}
				n++
			}
		}
		if n := enqueue(quiet, outboxMsg("quiet", "q", 1)); n > 0 {
			t.Fatalf("an Enqueue WithoutNotify sent %d notifications, want none", n)
		}
		if n := enqueue(loud, outboxMsg("loud", "l", 2)); n != 1 && n != -1 {
			t.Fatalf("a default Enqueue sent %d notifications, want 1", n)
		}
		// The relay finds the quiet message by polling.
		p := newOutboxRecorder()
		stop := startRelay(ctx, t, quiet, p, fastRelay()...)
		waitOutbox(ctx, t, "quiet and loud published", func() bool {
			q, _ := p.count("quiet")
			l, _ := p.count("loud")
			return q == 1 && l == 1
		})
		stop()
	})

	t.Run("Listen", func(t *testing.T) {
		db := f(t, 0)
		ctx := ctxT(t)
		l := db.Driver().Engine().Capabilities().OutboxListener
		if l == nil {
			t.Skip("the engine has no OutboxListener: the relay polls")
		}
		// Through lib/pq or a pooler the listener cannot listen
		// (ErrNoRun): the relay polls there too.
		lctx, cancel := context.WithCancel(ctx)
		ready, listened := make(chan struct{}), make(chan error, 1)
		go func() { listened <- l.OutboxListen(lctx, func() { close(ready) }, func() {}) }()
		select {
		case err := <-listened:
			cancel()
			if errors.Is(err, driver.ErrNoRun) {
				t.Skip("the listener cannot listen here: the relay polls")
			}
			t.Fatalf("OutboxListen: %v", err)
		case <-ready:
			cancel()
			<-listened
		}
		s, err := outbox.New(db.Driver())
		must(t, err)
		p := newOutboxRecorder()
		// A poll interval far longer than the case's context: a message
		// leaves only when the notification of its commit wakes the relay.
		startRelay(ctx, t, s, p, outbox.WithPollInterval(time.Hour))
		for i := range 3 {
			id := fmt.Sprint("m", i)
			res, err := outboxEnqueue(ctx, db, s, outboxMsg(id, "k", i), false)
			wantOutcome(t, id, res, err, sqlonce.FirstRun, nil)
			waitOutbox(ctx, t, id+" published", func() bool { n, _ := p.count(id); return n == 1 })
		}
	})
}

// outboxCanListen reports whether db's driver can listen for the
// outbox's notifications: it has an OutboxListener, and the handle holds
// a session (not through PgBouncer in transaction mode, not lib/pq).
func outboxCanListen[TTx any](ctx context.Context, t testing.TB, db harness.DB[TTx]) bool {
	t.Helper()
	l := db.Driver().Engine().Capabilities().OutboxListener
	if l == nil {
		return false
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready, listened := make(chan struct{}), make(chan error, 1)
	go func() { listened <- l.OutboxListen(lctx, func() { close(ready) }, func() {}) }()
	select {
	case err := <-listened:
		if errors.Is(err, driver.ErrNoRun) {
			return false
		}
		t.Fatalf("OutboxListen: %v", err)
	case <-ready:
		cancel()
		<-listened
	}
	return true
}
