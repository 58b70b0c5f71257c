package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runOutboxDriver drives the outbox's driver contract (driver.Outbox)
// directly, on db.Driver().Engine(), with "now" pinned where time
// matters: what package outbox builds on.
func runOutboxDriver[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("InsertDuplicateRollback", func(t *testing.T) { outboxInsert(t, f) })
	t.Run("ClaimOrderLeases", func(t *testing.T) { outboxClaimOrder(t, f) })
	t.Run("HeldClaimHoldsKey", func(t *testing.T) { outboxHeldClaim(t, f) })
	t.Run("ConcurrentClaims", func(t *testing.T) { outboxConcurrent(t, f) })
	t.Run("Listen", func(t *testing.T) { outboxListen(t, f) })
}

// outboxListen: on PostgreSQL through pgx (pgxdriver, or pgx's stdlib
// under pgsqldriver), a committed insert wakes the listener; through
// lib/pq or PgBouncer the listener answers ErrNoRun (the relay polls);
// elsewhere there is none.
func outboxListen[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	l := db.Driver().Engine().Capabilities().OutboxListener
	top, _, _ := strings.Cut(t.Name(), "/")
	if db.Dialect() != "postgres" {
		if l != nil {
			t.Fatalf("%s: an OutboxListener on %s", top, db.Dialect())
		}
		t.Skip("no LISTEN/NOTIFY on " + db.Dialect())
	}
	if l == nil {
		t.Fatal("no OutboxListener on PostgreSQL")
	}
	want := !strings.Contains(top, "PgBouncer") && !strings.HasSuffix(top, "PQ")
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	readyC, wakeC, errC := make(chan struct{}), make(chan struct{}, 1), make(chan error, 1)
	go func() {
		errC <- l.OutboxListen(lctx, func() { close(readyC) }, func() {
			select {
			case wakeC <- struct{}{}:
			default:
			}
		})
	}()
	select {
	case err := <-errC:
		if want || !errors.Is(err, driver.ErrNoRun) {
			t.Fatalf("%s: OutboxListen returned %v before listening", top, err)
		}
		return
	case <-readyC:
		if !want {
			t.Fatalf("%s: OutboxListen listens, want ErrNoRun", top)
		}
	}
	obInsert(t, ctx, db, time.Time{}, obMsg("wake-1", ""))
	select {
	case <-wakeC:
	case err := <-errC:
		t.Fatalf("OutboxListen returned %v before a wake", err)
	}
	cancel()
	if err := <-errC; !errors.Is(err, context.Canceled) {
		t.Fatalf("OutboxListen after cancel: %v", err)
	}
}

// obx runs fn in a transaction of its own on db, committing on nil.
func obx[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], fn func(e driver.Engine[TTx], tx TTx) error) {
	t.Helper()
	e := db.Driver().Engine()
	if _, err := retryTx(ctx, db, harness.Default, func(tx TTx) error { return fn(e, tx) }); err != nil {
		t.Fatal(err)
	}
}

func obMsg(id, key string) driver.OutboxMessage {
	return driver.OutboxMessage{
		ID: id, Topic: "orders", OrderingKey: key, Payload: []byte("payload of " + id),
		Headers: []byte("h=" + id), Fingerprint: []byte("fp-" + id),
	}
}

func obInsert[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], now time.Time, msgs ...driver.OutboxMessage) {
	t.Helper()
	obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
		for _, m := range msgs {
			ins, _, err := e.OutboxInsert(ctx, tx, m, now)
			if err != nil {
				return err
			}
			if !ins {
				return fmt.Errorf("insert %s: not inserted", m.ID)
			}
		}
		return nil
	})
}

func obClaim[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], limit int, lease time.Duration, now time.Time) []driver.OutboxClaimed {
	t.Helper()
	var got []driver.OutboxClaimed
	obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
		var err error
		got, err = e.OutboxClaim(ctx, tx, limit, lease, now)
		return err
	})
	return got
}

func obIDs(c []driver.OutboxClaimed) string {
	var b bytes.Buffer
	for i, m := range c {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.ID)
	}
	return b.String()
}

func obWant(t testing.TB, what string, c []driver.OutboxClaimed, want string) {
	t.Helper()
	if got := obIDs(c); got != want {
		t.Fatalf("%s: claimed [%s], want [%s]", what, got, want)
	}
}

func obGet[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], id string, now time.Time) (driver.OutboxRow, bool) {
	t.Helper()
	var row driver.OutboxRow
	var ok bool
	obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
		var err error
		row, ok, err = e.OutboxGet(ctx, tx, id, now)
		return err
	})
	return row, ok
}

// obT0 is a pinned "now", whole milliseconds (SQLite's clock resolution).
func obT0() time.Time { return time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour) }

func outboxInsert[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	t0 := obT0()
	m := obMsg("m-1", "k")
	obInsert(t, ctx, db, t0, m)

	// The same id again: not inserted, the stored fingerprint back, for
	// the same message and for another one alike.
	for _, again := range []driver.OutboxMessage{m, {ID: "m-1", Topic: "other", Payload: []byte("x"), Fingerprint: []byte("fp-other")}} {
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			ins, stored, err := e.OutboxInsert(ctx, tx, again, t0)
			if err != nil {
				return err
			}
			if ins || !bytes.Equal(stored, m.Fingerprint) {
				t.Errorf("repeat of %s (fingerprint %q): inserted %v, stored %q; want false, %q", again.ID, again.Fingerprint, ins, stored, m.Fingerprint)
			}
			return nil
		})
	}
	row, ok := obGet(t, ctx, db, "m-1", t0)
	if !ok || row.Topic != "orders" || row.OrderingKey != "k" || string(row.Payload) != "payload of m-1" ||
		string(row.Headers) != "h=m-1" || string(row.Fingerprint) != "fp-m-1" || row.State != driver.OutboxPending ||
		row.Attempts != 0 || row.Leased || !row.Created.Equal(t0) || !row.Available.Equal(t0) || !row.Sent.IsZero() || row.Seq <= 0 {
		t.Fatalf("get m-1: %v %+v", ok, row)
	}

	// Nil payload, headers and fingerprint are stored as empty.
	obInsert(t, ctx, db, t0, driver.OutboxMessage{ID: "m-nil", Topic: "t"})
	if row, ok := obGet(t, ctx, db, "m-nil", t0); !ok || len(row.Payload) != 0 || row.Seq <= 0 {
		t.Fatalf("get m-nil: %v %+v", ok, row)
	}

	// A rolled-back insert leaves no row, and its id is free.
	e := db.Driver().Engine()
	tx, err := db.Begin(ctx, harness.Default)
	must(t, err)
	if ins, _, err := e.OutboxInsert(ctx, tx, obMsg("m-rb", ""), t0); err != nil || !ins {
		t.Fatalf("insert m-rb: %v %v", ins, err)
	}
	must(t, db.Rollback(ctx, tx))
	if _, ok := obGet(t, ctx, db, "m-rb", t0); ok {
		t.Fatal("a rolled-back insert left its row")
	}
	obInsert(t, ctx, db, t0, obMsg("m-rb", ""))
	if _, ok := obGet(t, ctx, db, "m-absent", t0); ok {
		t.Fatal("get of an absent id found a row")
	}
}

func outboxClaimOrder[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	t0 := obT0()
	const lease = time.Minute
	obInsert(t, ctx, db, t0, obMsg("a1", "A"), obMsg("a2", "A"), obMsg("b1", "B"), obMsg("c1", ""), obMsg("c2", ""))
	obInsert(t, ctx, db, t0.Add(time.Hour), obMsg("late", "")) // available only at t0+1h

	// Per key: only the first unsent message; no key orders nothing.
	first := obClaim(t, ctx, db, 10, lease, t0.Add(time.Second))
	obWant(t, "first claim", first, "a1 b1 c1 c2")
	byID := map[string]driver.OutboxClaimed{}
	for _, c := range first {
		byID[c.ID] = c
		if c.Token == 0 || c.Topic != "orders" || string(c.Payload) != "payload of "+c.ID || string(c.Headers) != "h="+c.ID ||
			string(c.Fingerprint) != "fp-"+c.ID || c.Attempts != 0 || !c.Created.Equal(t0) {
			t.Fatalf("claimed %+v", c)
		}
	}
	if !(byID["a1"].Seq < byID["b1"].Seq && byID["b1"].Seq < byID["c1"].Seq) {
		t.Fatalf("seqs not in order: %+v", first)
	}
	// The leases hold: nothing more, a2 held back by its leased a1.
	obWant(t, "claim under the leases", obClaim(t, ctx, db, 10, lease, t0.Add(2*time.Second)), "")
	if row, _ := obGet(t, ctx, db, "a1", t0.Add(2*time.Second)); !row.Leased || !row.LockedUntil.Equal(t0.Add(time.Second+lease)) {
		t.Fatalf("a1 while leased: %+v", row)
	}

	// A limit takes the first ones in seq order.
	sent := func(now time.Time, want int64, leases ...driver.OutboxLease) {
		t.Helper()
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			n, err := e.OutboxSent(ctx, tx, leases, now)
			if err == nil && n != want {
				t.Fatalf("sent %v: %d marked, want %d", leases, n, want)
			}
			return err
		})
	}
	failed := func(l driver.OutboxLease, retryAt time.Time, park bool, now time.Time, want bool) {
		t.Helper()
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			ok, err := e.OutboxFailed(ctx, tx, l, "broker said no", retryAt, park, now)
			if err == nil && ok != want {
				t.Fatalf("failed %v: %v, want %v", l, ok, want)
			}
			return err
		})
	}

	// a1 fails, due again in an hour: a2 stays held back, a1 is not due.
	failed(byID["a1"].OutboxLease, t0.Add(time.Hour), false, t0.Add(3*time.Second), true)
	failed(byID["a1"].OutboxLease, t0.Add(time.Hour), false, t0.Add(3*time.Second), false) // no longer leased
	if row, _ := obGet(t, ctx, db, "a1", t0.Add(3*time.Second)); row.Leased || row.Attempts != 1 || row.LastError != "broker said no" ||
		row.State != driver.OutboxPending || !row.Available.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a1 after its failure: %+v", row)
	}
	// c1, c2 sent in one call, with one stale lease among them.
	sent(t0.Add(4*time.Second), 2, byID["c1"].OutboxLease, byID["c2"].OutboxLease, driver.OutboxLease{Seq: byID["b1"].Seq, Token: byID["b1"].Token + 7})
	sent(t0.Add(4*time.Second), 0, byID["c1"].OutboxLease) // once
	obWant(t, "claim with a1 backing off", obClaim(t, ctx, db, 10, lease, t0.Add(5*time.Second)), "")

	// b1's lease lapses: claimed again with a new token, which fences the
	// old one.
	again := obClaim(t, ctx, db, 10, lease, t0.Add(10*time.Minute))
	obWant(t, "claim after b1's lease lapsed", again, "b1")
	if again[0].Token == byID["b1"].Token {
		t.Fatalf("b1 claimed again with the same token %d", again[0].Token)
	}
	sent(t0.Add(10*time.Minute), 0, byID["b1"].OutboxLease)
	failed(byID["b1"].OutboxLease, t0, true, t0.Add(10*time.Minute), false)
	sent(t0.Add(10*time.Minute), 1, again[0].OutboxLease)

	// An hour on: a1 due again (attempts 1), "late" due; a2 still held.
	at := t0.Add(time.Hour + time.Minute)
	c := obClaim(t, ctx, db, 10, lease, at)
	obWant(t, "claim an hour on", c, "a1 late")
	if c[0].Attempts != 1 {
		t.Fatalf("a1 claimed with attempts %d, want 1", c[0].Attempts)
	}
	sent(at, 2, c[0].OutboxLease, c[1].OutboxLease)
	// a1 sent: a2 claimable.
	c = obClaim(t, ctx, db, 10, lease, at)
	obWant(t, "claim once a1 is sent", c, "a2")

	// a2 parked: a3 held back while it is; redrive makes a2 due again.
	obInsert(t, ctx, db, at, obMsg("a3", "A"))
	failed(c[0].OutboxLease, time.Time{}, true, at, true)
	obWant(t, "claim with a2 parked", obClaim(t, ctx, db, 10, lease, at), "")
	if row, _ := obGet(t, ctx, db, "a2", at); row.State != driver.OutboxParked || row.Attempts != 1 || row.Leased {
		t.Fatalf("a2 parked: %+v", row)
	}
	var rows []driver.OutboxRow
	obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
		var err error
		rows, err = e.OutboxList(ctx, tx, driver.OutboxParked, 0, 10, at)
		return err
	})
	if len(rows) != 1 || rows[0].ID != "a2" {
		t.Fatalf("parked list: %+v", rows)
	}
	stats := func(now time.Time) driver.OutboxStats {
		var s driver.OutboxStats
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			var err error
			s, err = e.OutboxStats(ctx, tx, now)
			return err
		})
		return s
	}
	if s := stats(at); s.Pending != 1 || s.Parked != 1 || s.Sent != 5 || !s.OldestPending.Equal(at) {
		t.Fatalf("stats: %+v (a3 pending since %v)", s, at)
	}
	redrive := func(id string, want bool) {
		t.Helper()
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			ok, err := e.OutboxRedrive(ctx, tx, id, at)
			if err == nil && ok != want {
				t.Fatalf("redrive %s: %v, want %v", id, ok, want)
			}
			return err
		})
	}
	redrive("a2", true)
	redrive("a2", false) // not parked any more
	redrive("a3", false) // pending
	redrive("nope", false)
	c = obClaim(t, ctx, db, 10, lease, at)
	obWant(t, "claim after the redrive", c, "a2")
	if c[0].Attempts != 0 {
		t.Fatalf("a2 redriven with attempts %d, want 0", c[0].Attempts)
	}

	// Forget: refused while leased unless forced; then a3 is free.
	forget := func(id string, force, want bool) {
		t.Helper()
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			ok, err := e.OutboxForget(ctx, tx, id, force, at)
			if err == nil && ok != want {
				t.Fatalf("forget %s force=%v: %v, want %v", id, force, ok, want)
			}
			return err
		})
	}
	forget("a2", false, false)
	forget("a2", true, true)
	forget("a2", true, false)
	obWant(t, "claim after a2 forgotten", obClaim(t, ctx, db, 10, lease, at), "a3")

	// Purge: the sent messages before the bound, up to the limit.
	purge := func(limit int, before time.Time) int64 {
		var n int64
		obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
			var err error
			n, err = e.OutboxPurge(ctx, tx, limit, before)
			return err
		})
		return n
	}
	// Sent: c1, c2 at t0+4s, b1 at t0+10m, a1, late at t0+1h1m, m-nil none.
	if n := purge(10, t0.Add(5*time.Second)); n != 2 {
		t.Fatalf("purge before t0+5s: %d, want 2", n)
	}
	if n := purge(1, at.Add(time.Second)); n != 1 {
		t.Fatalf("purge limit 1: %d, want 1", n)
	}
	if _, ok := obGet(t, ctx, db, "b1", at); ok {
		t.Fatal("purge left b1, the oldest sent")
	}
	if n := purge(10, at.Add(time.Second)); n != 2 {
		t.Fatalf("purge of the rest: %d, want 2", n)
	}
	if s := stats(at); s.Pending != 1 || s.Parked != 0 || s.Sent != 0 {
		t.Fatalf("stats after the purge: %+v", s)
	}
}

// outboxHeldClaim: a claim whose transaction is still open holds its
// messages locked; another claim skips them, and a held key's later
// message is not claimable either.
func outboxHeldClaim[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	if db.Dialect() == "sqlite" {
		t.Skip("SQLite: one writer, a second claim waits for the first's COMMIT")
	}
	ctx := ctxT(t)
	t0 := obT0()
	obInsert(t, ctx, db, t0, obMsg("h-a1", "A"), obMsg("h-a2", "A"), obMsg("h-b1", "B"))
	e := db.Driver().Engine()
	tx, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer db.Rollback(ctx, tx)
	held, err := e.OutboxClaim(ctx, tx, 1, time.Minute, t0.Add(time.Second))
	must(t, err)
	obWant(t, "held claim", held, "h-a1")
	obWant(t, "claim beside the held one", obClaim(t, ctx, db, 10, time.Minute, t0.Add(time.Second)), "h-b1")
	must(t, db.Rollback(ctx, tx))
	// Rolled back: h-a1 is due again, with no lease.
	obWant(t, "claim after the rollback", obClaim(t, ctx, db, 10, time.Minute, t0.Add(time.Second)), "h-a1")
}

// outboxConcurrent: 16 claimers race on the same rows with leases that
// never lapse: every message is claimed exactly once, and a key's message
// only once the one before it was sent.
func outboxConcurrent[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	const claimers, keys, perKey, unkeyed = 16, 12, 5, 24
	db := f(t, claimers+4)
	var msgs []driver.OutboxMessage
	prev := map[string]string{} // a message's predecessor of its key
	for i := range perKey {
		for k := range keys {
			id := fmt.Sprintf("k%d-%d", k, i)
			if i > 0 {
				prev[id] = fmt.Sprintf("k%d-%d", k, i-1)
			}
			msgs = append(msgs, obMsg(id, fmt.Sprintf("k%d", k)))
		}
	}
	for i := range unkeyed {
		msgs = append(msgs, obMsg(fmt.Sprintf("u-%d", i), ""))
	}
	obInsert(t, ctx, db, time.Time{}, msgs...)

	var (
		mu       sync.Mutex
		claimed  = map[string]int{}
		sentSet  = map[string]bool{}
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	total := len(msgs)
	done := func() bool { mu.Lock(); defer mu.Unlock(); return len(sentSet) == total }
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idle := 0; !done() && idle < 2000 && failures.Load() == 0; {
				var got []driver.OutboxClaimed
				_, err := retryTx(ctx, db, harness.Default, func(tx TTx) error {
					var err error
					got, err = db.Driver().Engine().OutboxClaim(ctx, tx, 3, time.Hour, time.Time{})
					return err
				})
				if err != nil {
					t.Error(err)
					failures.Add(1)
					return
				}
				if len(got) == 0 {
					idle++
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, c := range got {
					claimed[c.ID]++
					if p, ok := prev[c.ID]; ok && !sentSet[p] {
						t.Errorf("%s claimed before %s was sent", c.ID, p)
						failures.Add(1)
					}
				}
				mu.Unlock()
				leases := make([]driver.OutboxLease, len(got))
				for i, c := range got {
					leases[i] = c.OutboxLease
				}
				// Recorded sent before the COMMIT that lets the next of
				// the key be claimed.
				_, err = retryTx(ctx, db, harness.Default, func(tx TTx) error {
					n, err := db.Driver().Engine().OutboxSent(ctx, tx, leases, time.Time{})
					if err == nil && n != int64(len(leases)) {
						return fmt.Errorf("sent %d of %d leases held", n, len(leases))
					}
					mu.Lock()
					for _, c := range got {
						sentSet[c.ID] = true
					}
					mu.Unlock()
					return err
				})
				if err != nil {
					t.Error(err)
					failures.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, m := range msgs {
		if n := claimed[m.ID]; n != 1 {
			t.Errorf("%s claimed %d times, want 1", m.ID, n)
		}
	}
	var s driver.OutboxStats
	obx(t, ctx, db, func(e driver.Engine[TTx], tx TTx) error {
		var err error
		s, err = e.OutboxStats(ctx, tx, time.Time{})
		return err
	})
	if s.Pending != 0 || s.Sent != int64(total) || s.Parked != 0 {
		t.Fatalf("stats at the end: %+v, want %d sent", s, total)
	}
}
