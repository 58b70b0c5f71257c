package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// recorder is an Observer that keeps every Event.
type recorder struct {
	mu     sync.Mutex
	events []sqlonce.Event
}

func (r *recorder) Observe(_ context.Context, e sqlonce.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// count counts the events of strategy and operation by outcome.
func (r *recorder) count(strategy, operation string) map[sqlonce.EventStatus]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[sqlonce.EventStatus]int{}
	for _, e := range r.events {
		if e.Strategy == strategy && e.Operation == operation {
			n[e.Status]++
		}
	}
	return n
}

func (r *recorder) last() sqlonce.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[len(r.events)-1]
}

// slogRecords parses the JSON lines a slog.JSONHandler wrote.
func slogRecords(t testing.TB, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		must(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	must(t, sc.Err())
	return out
}

// runObserve: every dedupe operation reports one Event, and the events
// (and the slog records made of them) add up to what the database holds.
func runObserve[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("DedupeRaceCountsMatchDatabase", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, Racers+4)
		rec := &recorder{}
		var logs bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s, err := dedupe.New(sqlonce.Observe(db.Driver(), sqlonce.Observers(rec, sqlonce.SlogObserver(logger))))
		must(t, err)

		const keys, perKey = 8, 4
		calls := keys * perKey
		errs := race(calls, func(i int) error {
			req := dedupe.Request{Scope: "observe", Key: fmt.Sprintf("secret-key-%d", i%keys)}
			_, err := s.Run(ctx, req, drWork(db, req.Key, []byte("receipt"), nil))
			return err
		})
		noErrors(t, errs)

		rows, err := db.KeyCount(ctx)
		must(t, err)
		ledger, err := db.Pool().OrderCount(ctx) // orders untouched: 0
		must(t, err)
		if ledger != 0 {
			t.Fatalf("orders: %d", ledger)
		}
		perRef, err := db.Pool().LedgerCountPerRef(ctx)
		must(t, err)
		var ledgerRows int64
		for _, n := range perRef {
			ledgerRows += n
		}
		got := rec.count("dedupe", "Run")
		t.Logf("%s: %d calls, %d keys rows, %d ledger rows, events %v", db.Dialect(), calls, rows, ledgerRows, got)
		if int64(got[sqlonce.EventFirstRun]) != rows || rows != keys || ledgerRows != keys {
			t.Fatalf("first_run events %d, key rows %d, ledger rows %d, want %d", got[sqlonce.EventFirstRun], rows, ledgerRows, keys)
		}
		if int64(got[sqlonce.EventReplayed]) != int64(calls)-rows {
			t.Fatalf("replayed events %d, want calls-rows = %d", got[sqlonce.EventReplayed], int64(calls)-rows)
		}

		rec.mu.Lock()
		for _, e := range rec.events {
			if e.Scope != "observe" || e.Attempts < 1 || e.Duration <= 0 || e.Duration < e.Wait+e.Work-time.Millisecond {
				t.Errorf("event %+v", e)
			}
			if e.Status == sqlonce.EventFirstRun && e.Work <= 0 {
				t.Errorf("first run without work time: %+v", e)
			}
			if e.ResponseSize != len("receipt") {
				t.Errorf("response size %d: %+v", e.ResponseSize, e)
			}
		}
		rec.mu.Unlock()

		// The slog records are the same events, at their levels, and
		// never name a key.
		if strings.Contains(logs.String(), "secret-key") {
			t.Fatalf("a log record holds an idempotency key:\n%s", logs.String())
		}
		byOutcome := map[string]int{}
		for _, r := range slogRecords(t, &logs) {
			if r["msg"] != "sqlonce" || r["strategy"] != "dedupe" || r["operation"] != "Run" || r["scope"] != "observe" {
				t.Fatalf("record %v", r)
			}
			outcome := r["status"].(string)
			byOutcome[outcome]++
			want := map[string]string{"first_run": "DEBUG", "replayed": "INFO"}[outcome]
			if _, retried := r["attempts"]; retried {
				want = "INFO"
			}
			if r["level"] != want {
				t.Errorf("%s logged at %v, want %s", outcome, r["level"], want)
			}
		}
		if int64(byOutcome["first_run"]) != rows || int64(byOutcome["replayed"]) != int64(calls)-rows {
			t.Fatalf("slog records by outcome %v; database: %d rows of %d calls", byOutcome, rows, calls)
		}
	})

	t.Run("DedupeOutcomes", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		rec := &recorder{}
		var logs bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, nil)) // Info and above
		s, err := dedupe.New(sqlonce.Observe(db.Driver(), sqlonce.Observers(rec, sqlonce.SlogObserver(logger))))
		must(t, err)
		want := func(what string, op string, outcome sqlonce.EventStatus) sqlonce.Event {
			t.Helper()
			e := rec.last()
			if e.Strategy != "dedupe" || e.Operation != op || e.Status != outcome {
				t.Fatalf("%s: event %s.%s %v (%v), want %s %v", what, e.Strategy, e.Operation, e.Status, e.Err, op, outcome)
			}
			return e
		}
		req := dedupe.Request{Scope: "obs", Key: "k1", Fingerprint: dedupe.Fingerprint([]byte("a"))}
		must(t, harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := s.Do(ctx, tx, req, func(ctx context.Context) error { return db.Tx(tx).LedgerInsert(ctx, "k1", 1) })
			return err
		}))
		want("Do", "Do", sqlonce.EventFirstRun)
		must(t, harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := s.Do(ctx, tx, req, func(ctx context.Context) error { return errors.New("must not run") })
			return err
		}))
		want("Do again", "Do", sqlonce.EventAlreadyDone)
		other := req
		other.Fingerprint = dedupe.Fingerprint([]byte("b"))
		err = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := s.DoResponse(ctx, tx, other, func(ctx context.Context) ([]byte, error) { return nil, nil })
			return err
		})
		if e := want("key reuse", "DoResponse", sqlonce.EventKeyReuse); !errors.Is(e.Err, sqlonce.ErrKeyReuse) || !errors.Is(err, sqlonce.ErrKeyReuse) || strings.Contains(e.Err.Error(), "k1") {
			t.Fatalf("key reuse event error %v, call's %v", e.Err, err)
		}

		// Leases: claim, in progress, complete, replay, lost.
		lreq := dedupe.Request{Scope: "obs", Key: "lease-1"}
		l, _, err := s.Claim(ctx, lreq, time.Minute)
		must(t, err)
		want("Claim", "Claim", sqlonce.EventFirstRun)
		_, _, err = s.Claim(ctx, lreq, time.Minute)
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("second claim: %v", err)
		}
		want("Claim held", "Claim", sqlonce.EventInProgress)
		must(t, s.Complete(ctx, l, []byte("done")))
		want("Complete", "Complete", sqlonce.EventOK)
		_, res, err := s.Claim(ctx, lreq, time.Minute)
		must(t, err)
		if e := want("Claim done", "Claim", sqlonce.EventReplayed); e.ResponseSize != 4 || string(res.Response) != "done" {
			t.Fatalf("replayed claim: %+v", e)
		}
		if err := s.Complete(ctx, l, []byte("again")); !errors.Is(err, sqlonce.ErrLeaseLost) {
			t.Fatalf("stale complete: %v", err)
		}
		want("stale Complete", "Complete", sqlonce.EventLeaseLost)
		n, err := s.Purge(ctx, 0)
		must(t, err)
		if e := want("Purge", "Purge", sqlonce.EventOK); e.Rows != n {
			t.Fatalf("purge event rows %d, Purge %d", e.Rows, n)
		}

		// At Info: the already done, the refusals, the replay and the lost
		// lease, not the first runs.
		var levels []string
		for _, r := range slogRecords(t, &logs) {
			levels = append(levels, fmt.Sprint(r["operation"], ":", r["status"], ":", r["level"]))
		}
		wantLevels := "[Do:already_done:INFO DoResponse:key_reuse:INFO Claim:in_progress:INFO Claim:replayed:INFO Complete:lease_lost:WARN]"
		if fmt.Sprint(levels) != wantLevels {
			t.Fatalf("slog records %v, want %s", levels, wantLevels)
		}
	})

	t.Run("EveryStrategyReports", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		rec := &recorder{}
		drv := sqlonce.Observe(db.Driver(), rec)
		var seen []string
		want := func(what, strategy, op, scope string, outcome sqlonce.EventStatus) {
			t.Helper()
			e := rec.last()
			if e.Strategy != strategy || e.Operation != op || e.Scope != scope || e.Status != outcome {
				t.Fatalf("%s: event %s.%s scope %q %v (%v), want %s.%s scope %q %v", what, e.Strategy, e.Operation, e.Scope, e.Status, e.Err, strategy, op, scope, outcome)
			}
			seen = append(seen, fmt.Sprint(e.Strategy, ".", e.Operation, ":", e.Status))
		}
		inTx := func(fn func(tx TTx) error) {
			t.Helper()
			must(t, harness.WithTx(ctx, db, harness.ReadCommitted, fn))
		}

		// unique: the constraint is the scope.
		ins, err := unique.New(drv)
		must(t, err)
		var orderID int64
		for i, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			inTx(func(tx TTx) error {
				_, err := ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
					id, err := db.Tx(tx).OrderInsert(ctx, "OBS-1", "c", 0)
					if i == 0 {
						orderID = id
					}
					return err
				})
				return err
			})
			want("unique", "unique", "Insert", codeKey, outcome)
		}
		for _, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			inTx(func(tx TTx) error {
				_, err := ins.InsertOne(ctx, tx, codeKey, func(ctx context.Context) error {
					_, err := db.Tx(tx).OrderInsert(ctx, "OBS-2", "c2", 0)
					return err
				})
				return err
			})
			want("unique one", "unique", "InsertOne", codeKey, outcome)
		}

		// token: issued, consumed, consumed again, unknown.
		ts, err := token.New(drv)
		must(t, err)
		tok, err := ts.Issue(ctx, "checkout")
		must(t, err)
		want("token issue", "token", "Issue", "checkout", sqlonce.EventOK)
		for _, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			inTx(func(tx TTx) error { _, err := ts.Consume(ctx, tx, "checkout", tok); return err })
			want("token consume", "token", "Consume", "checkout", outcome)
		}
		_ = harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := ts.Consume(ctx, tx, "checkout", strings.Repeat("A", token.Len))
			return err
		})
		want("unknown token", "token", "Consume", "checkout", sqlonce.EventError)
		if e := rec.last(); !errors.Is(e.Err, token.ErrUnknown) {
			t.Fatalf("unknown token event: %v", e.Err)
		}

		// inbox: its own events, not its Store's as dedupe's.
		in, err := inbox.New(drv, "mailer")
		must(t, err)
		before := len(rec.count("dedupe", "Do"))
		for _, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			_, err := in.Handle(ctx, "msg-secret-1", func(ctx context.Context, tx TTx) error {
				return db.Tx(tx).LedgerInsert(ctx, "msg", 1)
			})
			must(t, err)
			want("inbox", "inbox", "Handle", "mailer", outcome)
		}
		for _, c := range []struct {
			ids     []string
			outcome sqlonce.EventStatus
			fresh   int64
		}{
			{[]string{"b1", "b2"}, sqlonce.EventFirstRun, 2},
			{[]string{"b1", "b3"}, sqlonce.EventFirstRun, 1},
			{[]string{"b1", "b2"}, sqlonce.EventAlreadyDone, 0},
		} {
			_, err := in.HandleBatch(ctx, c.ids, func(ctx context.Context, tx TTx, fresh []string) error { return nil })
			must(t, err)
			want("inbox batch", "inbox", "HandleBatch", "mailer", c.outcome)
			if e := rec.last(); e.Rows != c.fresh {
				t.Fatalf("batch %v: Rows %d, want %d fresh", c.ids, e.Rows, c.fresh)
			}
		}
		if n := len(rec.count("dedupe", "Do")) + len(rec.count("dedupe", "DoBatch")); n != before {
			t.Fatalf("the inbox's Store reported %d dedupe events", n)
		}

		// dedupe.DoBatch: one Event per batch, the fresh keys in Rows.
		ds, err := dedupe.New(drv)
		must(t, err)
		for _, c := range []struct {
			ids     []string
			outcome sqlonce.EventStatus
			fresh   int64
		}{
			{[]string{"x", "y", "x"}, sqlonce.EventFirstRun, 2},
			{[]string{"x", "y"}, sqlonce.EventAlreadyDone, 0},
			{nil, sqlonce.EventOK, 0},
		} {
			inTx(func(tx TTx) error {
				_, err := ds.DoBatch(ctx, tx, "batch", c.ids, func(context.Context, []string) error { return nil })
				return err
			})
			want("dedupe batch", "dedupe", "DoBatch", "batch", c.outcome)
			if e := rec.last(); e.Rows != c.fresh {
				t.Fatalf("batch %v: Rows %d, want %d fresh", c.ids, e.Rows, c.fresh)
			}
		}

		// optimistic and statemachine: the Observer comes with ctx.
		octx := sqlonce.ContextWithObserver(ctx, rec)
		for _, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			inTx(func(tx TTx) error {
				rows, err := db.Tx(tx).OrderAddAmount(ctx, orderID, 1, 5)
				if err != nil {
					return err
				}
				_, err = optimistic.Update(octx, rows, int64(1), func(ctx context.Context) (int64, error) {
					return db.Tx(tx).OrderGetVersion(ctx, orderID)
				})
				return err
			})
			want("optimistic", "optimistic", "Update", "", outcome)
		}
		for _, outcome := range []sqlonce.EventStatus{sqlonce.EventFirstRun, sqlonce.EventAlreadyDone} {
			inTx(func(tx TTx) error {
				_, err := orderStates.Transition(octx, statusCreated, statusPaid,
					func(ctx context.Context) (int64, error) {
						return db.Tx(tx).OrderSetStatus(ctx, orderID, "created", "paid")
					},
					func(ctx context.Context) (orderStatus, error) {
						s, err := db.Tx(tx).OrderGetStatus(ctx, orderID)
						return orderStatus(s), err
					})
				return err
			})
			want("statemachine", "statemachine", "Transition", "created->paid", outcome)
		}
		for rows, outcome := range []sqlonce.EventStatus{sqlonce.EventAlreadyDone, sqlonce.EventFirstRun} {
			if _, err := unique.Inserted(octx, int64(rows)); err != nil {
				t.Fatal(err)
			}
			want("unique rows", "unique", "Inserted", "", outcome)
		}
		// Without an Observer in ctx, nothing is reported.
		n := len(rec.events)
		_, _ = optimistic.Update(ctx, 1, int64(1), func(ctx context.Context) (int64, error) { return 0, nil })
		if len(rec.events) != n {
			t.Fatal("optimistic reported without an Observer in ctx")
		}
		t.Logf("%s: %v", db.Dialect(), seen)
	})

	for _, lease := range []bool{false, true} {
		name := map[bool]string{false: "HTTPIdemTx", true: "HTTPIdemLease"}[lease]
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, Racers+4)
			rec := &recorder{}
			mode := httpidem.New[TTx]
			if lease {
				mode = leased[TTx]
			}
			m, err := mode(sqlonce.Observe(db.Driver(), rec), func(r *http.Request) string { return "user-1" })
			must(t, err)
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Header.Get("Idempotency-Key")
				if lease {
					// In a transaction of its own: through PgBouncer in
					// transaction mode, lib/pq's autocommit statements may
					// lose their unnamed prepared statement.
					if err := harness.WithTx(r.Context(), db, harness.Default, func(tx TTx) error {
						return db.Tx(tx).LedgerInsert(r.Context(), key, 1)
					}); err != nil {
						httpidem.Fail(r.Context(), err)
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				} else {
					tx, _ := httpidem.TxFrom[TTx](r.Context())
					if err := db.Tx(tx).LedgerInsert(r.Context(), key, 1); err != nil {
						httpidem.Fail(r.Context(), err)
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				}
				time.Sleep(5 * time.Millisecond) // let duplicates meet a request in flight
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"id":1}`))
			}))
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			post := func(key, body string) int {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
				must(t, err)
				req.Header.Set("Idempotency-Key", strconv.Quote(key))
				resp, err := http.DefaultClient.Do(req)
				must(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			const keys, perKey = 4, 6
			calls := keys * perKey
			statuses := make([]int, calls)
			noErrors(t, race(calls, func(i int) error {
				statuses[i] = post(fmt.Sprintf("http-secret-%d", i%keys), "{}")
				return nil
			}))
			if st := post("http-secret-0", `{"other":1}`); st != http.StatusUnprocessableEntity {
				t.Fatalf("key reuse answered %d", st)
			}
			rows, err := db.KeyCount(ctx)
			must(t, err)
			perRef, err := db.Pool().LedgerCountPerRef(ctx)
			must(t, err)
			got := rec.count("httpidem", "Serve")
			byStatus := map[int]int{}
			for _, st := range statuses {
				byStatus[st]++
			}
			t.Logf("%s: %d requests + 1 reuse, %d key rows, ledger %v; events %v; statuses %v", db.Dialect(), calls, rows, perRef, got, byStatus)
			if rows != keys || int64(got[sqlonce.EventFirstRun]) != rows || len(perRef) != keys {
				t.Fatalf("first_run events %d, key rows %d, ledger refs %d, want %d", got[sqlonce.EventFirstRun], rows, len(perRef), keys)
			}
			if got[sqlonce.EventReplayed]+got[sqlonce.EventInProgress] != calls-keys || got[sqlonce.EventKeyReuse] != 1 {
				t.Fatalf("replayed %d + in_progress %d, want %d; key_reuse %d, want 1", got[sqlonce.EventReplayed], got[sqlonce.EventInProgress], calls-keys, got[sqlonce.EventKeyReuse])
			}
			if byStatus[http.StatusConflict] != got[sqlonce.EventInProgress] {
				t.Fatalf("%d answers 409, %d in_progress events", byStatus[http.StatusConflict], got[sqlonce.EventInProgress])
			}
			want := map[sqlonce.EventStatus]int{sqlonce.EventFirstRun: 201, sqlonce.EventReplayed: 201, sqlonce.EventInProgress: 409, sqlonce.EventKeyReuse: 422}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.events {
				if e.Operation != "Serve" {
					t.Fatalf("the Middleware's Store reported %s.%s", e.Strategy, e.Operation)
				}
				if e.HTTPStatus != want[e.Status] || e.Scope == "" {
					t.Fatalf("event %v answered %d, scope %q", e.Status, e.HTTPStatus, e.Scope)
				}
				if e.Status == sqlonce.EventFirstRun && e.Work <= 0 {
					t.Fatalf("first run without work time: %+v", e)
				}
			}
			// The Event doc: the response recorded (first run) or
			// replayed. Every request answered the same 201, so a first
			// run records what a replay returns, in either mode.
			sizes := map[int]int{} // size: events
			for _, e := range rec.events {
				if e.Status == sqlonce.EventFirstRun || e.Status == sqlonce.EventReplayed {
					sizes[e.ResponseSize]++
				}
			}
			if len(sizes) != 1 || sizes[0] != 0 {
				t.Fatalf("response sizes of first runs and replays %v (size: events): want one size, not 0", sizes)
			}
		})
	}

	t.Run("Takeover", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		rec := &recorder{}
		s, err := dedupe.New(sqlonce.Observe(db.Driver(), rec))
		must(t, err)
		// PostgreSQL's and MySQL's drivers tell a takeover; SQLite's claim
		// is one upsert, and reports a first run.
		takeover := sqlonce.EventTakeover
		if db.Dialect() == "sqlite" {
			takeover = sqlonce.EventFirstRun
		}
		t0 := time.Now().UTC().Truncate(time.Second).Add(time.Hour)
		at := func(d time.Duration) context.Context { return testclock.With(ctx, t0.Add(d)) }
		want := func(what, op string, outcome sqlonce.EventStatus) {
			t.Helper()
			if e := rec.last(); e.Operation != op || e.Status != outcome {
				t.Fatalf("%s: %s %v (%v), want %s %v", what, e.Operation, e.Status, e.Err, op, outcome)
			}
		}

		// A lease whose holder never completes lapses; the next claim takes
		// the key over.
		lreq := dedupe.Request{Scope: "obs", Key: "lease-lapse"}
		_, _, err = s.Claim(at(0), lreq, time.Second)
		must(t, err)
		want("claim", "Claim", sqlonce.EventFirstRun)
		_, _, err = s.Claim(at(2*time.Second), lreq, time.Second)
		must(t, err)
		want("claim after the lapse", "Claim", takeover)

		// An expired key is taken over by Run and by Do.
		rreq := dedupe.Request{Scope: "obs", Key: "expiring", TTL: time.Second}
		work := func(ctx context.Context, tx TTx) ([]byte, error) { return []byte("r"), nil }
		_, err = s.Run(at(0), rreq, work)
		must(t, err)
		want("run", "Run", sqlonce.EventFirstRun)
		_, err = s.Run(at(2*time.Second), rreq, work)
		must(t, err)
		want("run after expiry", "Run", takeover)
		ctx4 := at(4 * time.Second)
		must(t, harness.WithTx(ctx4, db, harness.ReadCommitted, func(tx TTx) error {
			_, err := s.Do(ctx4, tx, rreq, func(ctx context.Context) error { return nil })
			return err
		}))
		want("do after expiry", "Do", takeover)
	})
}
