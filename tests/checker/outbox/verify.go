package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
)

// order is a row of the business table: the truth of what committed.
type order struct {
	key string
	seq int64
}

// effect is a row of the effects table.
type effect struct {
	key, id string
	n, seq  int64
}

// verify checks, from the database:
//   - the business table holds exactly the transactions that committed: a
//     COMMIT that answered, and an unknown one the producer read back as
//     committed; none rolled back;
//   - every committed message was applied once (one effect row), and no
//     message of a rolled-back transaction was delivered or applied;
//   - per key, the consumer applied the committed messages in the order
//     of their sequence numbers, all of them, with no gap;
//   - the outbox holds no pending or parked message, every committed
//     message is sent, and none of a rolled-back transaction is there.
func (r *run[TTx]) verify(ctx context.Context, store *outbox.Store[TTx]) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	orders := map[string]order{}
	rows, err := r.cfg.Reader.QueryContext(ctx, "SELECT code, customer, amount FROM orders")
	if err != nil {
		r.t.Fatalf("read orders: %v", err)
	}
	for rows.Next() {
		var id string
		var o order
		if err := rows.Scan(&id, &o.key, &o.seq); err != nil {
			r.t.Fatal(err)
		}
		orders[id] = o
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	rows.Close()
	var effects []effect
	rows, err = r.cfg.Reader.QueryContext(ctx, "SELECT okey, n, msg_id, seq FROM "+effectsTable+" ORDER BY okey, n")
	if err != nil {
		r.t.Fatalf("read effects: %v", err)
	}
	for rows.Next() {
		var e effect
		if err := rows.Scan(&e.key, &e.n, &e.id, &e.seq); err != nil {
			r.t.Fatal(err)
		}
		effects = append(effects, e)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	rows.Close()

	rep := r.rep
	c := r.counts
	c[cAttempts] = len(r.attempts)
	seen := map[string]bool{}
	var notCommitted []string
	committedSeqs := map[string][]int64{} // per key
	for _, a := range r.attempts {
		seen[a.id] = true
		o, exists := orders[a.id]
		switch a.end {
		case rolledBack:
			c[cRolledBack]++
		case failed:
			c[cFailed]++
		case unknown:
			c[cUnknown]++
			if a.resolved {
				c[cUnknownCommit]++
			}
		}
		switch {
		case a.end == committed && !exists:
			rep.violate("lost business write: %s's COMMIT answered, and its order row is not there", a.id)
		case (a.end == rolledBack || a.end == failed) && exists:
			rep.violate("%s rolled back (%v), and its order row is there", a.id, a.err)
		case a.end == unknown && a.resolved != exists:
			rep.violate("%s's COMMIT failed (%v); the producer read it back as committed=%v, the table now says %v", a.id, a.err, a.resolved, exists)
		}
		if exists {
			if o.key != a.key || o.seq != a.seq {
				rep.violate("%s's order row names key %s seq %d, written as %s %d", a.id, o.key, o.seq, a.key, a.seq)
			}
			committedSeqs[a.key] = append(committedSeqs[a.key], a.seq)
		} else {
			notCommitted = append(notCommitted, a.id)
		}
	}
	c[cCommitted] = len(orders)
	for id := range orders {
		if !seen[id] {
			rep.violate("an order row %s that no producer wrote", id)
		}
	}

	// Applied once; nothing rolled back applied.
	perID := map[string][]effect{}
	appliedSeqs := map[string][]int64{}
	for _, e := range effects {
		perID[e.id] = append(perID[e.id], e)
		appliedSeqs[e.key] = append(appliedSeqs[e.key], e.seq)
	}
	lost, doubled := 0, 0
	for id, o := range orders {
		switch n := len(perID[id]); {
		case n == 0:
			lost++
			if lost <= 20 {
				rep.violate("lost: committed message %s (key %s seq %d) was never applied (delivered %d times)", id, o.key, o.seq, r.deliveries(id))
			}
		case n > 1:
			doubled++
			rep.violate("doubled: message %s applied %d times", id, n)
		}
		for _, e := range perID[id] {
			if e.key != o.key || e.seq != o.seq {
				rep.violate("message %s applied as key %s seq %d; it was enqueued as key %s seq %d", id, e.key, e.seq, o.key, o.seq)
			}
		}
	}
	if lost > 20 {
		rep.violate("lost: %d committed messages never applied in all", lost)
	}
	for _, id := range notCommitted {
		if n := len(perID[id]); n > 0 {
			rep.violate("message %s of a transaction that rolled back was applied %d times", id, n)
		}
		if n := r.deliveries(id); n > 0 {
			rep.violate("message %s of a transaction that rolled back was delivered %d times", id, n)
		}
	}
	for id := range perID {
		if !seen[id] {
			rep.violate("an effect of message %s that no producer enqueued", id)
		}
	}
	r.delivered.Range(func(k, _ any) bool {
		if !seen[k.(string)] {
			rep.violate("a delivery of message %s that no producer enqueued", k)
		}
		return true
	})

	// Per-key order: the applied sequence numbers are the committed ones,
	// ascending, each once.
	keys := make([]string, 0, len(committedSeqs))
	for k := range committedSeqs {
		keys = append(keys, k)
	}
	for k := range appliedSeqs {
		if _, ok := committedSeqs[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := slices.Sorted(slices.Values(committedSeqs[k]))
		got := appliedSeqs[k]
		if i := firstDiff(got, want); i >= 0 {
			rep.violate("order of key %s: applied seqs %s, committed %s (first difference at position %d)", k, short(got, i), short(want, i), i)
		}
	}

	// The outbox: drained, every committed message sent, none of a
	// rolled-back transaction.
	st, err := store.Stats(ctx)
	switch {
	case err != nil:
		rep.violate("outbox Stats: %v", err)
	case st.Pending != 0 || st.Parked != 0:
		rep.violate("outbox not drained: %d pending, %d parked", st.Pending, st.Parked)
	default:
		c[cOutboxSent] = int(st.Sent)
	}
	for id := range orders {
		inf, err := store.Get(ctx, id)
		switch {
		case err != nil:
			rep.violate("outbox Get(%s), a committed message: %v", id, err)
		case inf.State != outbox.Sent:
			rep.violate("outbox Get(%s), a committed message: state %v after the drain", id, inf.State)
		default:
			c[cPublishFailures] += inf.Attempts
		}
	}
	for _, id := range notCommitted {
		if _, err := store.Get(ctx, id); !errors.Is(err, sqlonce.ErrNotFound) {
			rep.violate("outbox Get(%s), a message of a transaction that rolled back: %v, want sqlonce.ErrNotFound", id, err)
		}
	}

	if n, err := r.broker.Published(ctx); err == nil {
		if n >= 0 { // -1: the broker cannot tell
			c[cPublished] = int(n)
			c[cBrokerDups] = max(int(n)-len(orders), 0)
		}
	} else {
		rep.violate("count the broker's messages: %v", err)
	}
	c[cBrokerDownFetch] = r.broker.FetchFailures()
	for _, p := range r.cfg.Proxies {
		pc := p.Counts()
		c[cCutReply] += int(pc.Fired[faultproxy.LoseReply])
		c[cCutCommit] += int(pc.Fired[faultproxy.LoseCommit])
	}
}

// deliveries is how many times the consumer got message id.
func (r *run[TTx]) deliveries(id string) int64 {
	if v, ok := r.delivered.Load(id); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// firstDiff returns the first index where got and want differ, or -1.
func firstDiff(got, want []int64) int {
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			return i
		}
	}
	return -1
}

// short shows s around index i.
func short(s []int64, i int) string {
	lo, hi := max(i-3, 0), min(i+4, len(s))
	out := fmt.Sprint(s[lo:hi])
	if lo > 0 {
		out = "[..." + out[1:]
	}
	if hi < len(s) {
		out = out[:len(out)-1] + " ...]"
	}
	return out
}
