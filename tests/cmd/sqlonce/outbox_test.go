package sqlonce_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	so "github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

func TestOutboxSQLite(t *testing.T) {
	k := newKindsDB(t, sqliteTarget(t), "")
	db, err := modernc.Open(k.tg.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drv, err := sqlitedriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	outboxCmds(t, k, drv, sqlTx(db))
}

func TestOutboxPostgres(t *testing.T) {
	k := newKindsDB(t, postgresTarget(t), "")
	pool := pgxPool(t, k.tg.dsn)
	outboxCmds(t, k, testdrv.Pgx(t, pool), func(ctx context.Context, fn func(pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, pool, fn)
	})
}

func TestOutboxMySQL(t *testing.T) {
	tg := mysqlTarget(t)
	k := newKindsDB(t, tg, "")
	db := mysqlDB(t, tg.sqlDSN)
	outboxCmds(t, k, testdrv.MySQL(t, db), sqlTx(db))
}

// sqlTx runs fn in a transaction of db, committed when fn returns nil.
func sqlTx(db *sql.DB) func(context.Context, func(*sql.Tx) error) error {
	return func(ctx context.Context, fn func(*sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

// outboxCmds: an operator looks after an application's outbox from a
// shell. The application enqueues messages in its transactions (one rolled
// back) and a relay publishes them, but the broker refuses one for good:
// it is parked and holds back the later message of its key. stats and
// list show it, get its error; redrive makes it pending again, and a
// relay then publishes it and the message it held back, in order; forget
// deletes a message, and one a relay is publishing only with --leased.
// Each command's effect is counted in sqlonce_outbox.
func outboxCmds[TTx any](t *testing.T, k kindsDB, drv so.Driver[TTx], inTx func(context.Context, func(TTx) error) error) {
	ctx := context.Background()
	store, err := outbox.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(m outbox.Message) {
		t.Helper()
		if err := inTx(ctx, func(tx TTx) error {
			_, err := store.Enqueue(ctx, tx, m)
			return err
		}); err != nil {
			t.Fatalf("enqueue %s: %v", m.ID, err)
		}
	}
	enqueue(outbox.Message{ID: "m-1", Topic: "orders", Key: "cust-7", Payload: []byte(`{"order":1}`), Headers: map[string]string{"trace": "t-1"}})
	enqueue(outbox.Message{ID: "m-2", Topic: "orders", Key: "cust-7", Payload: []byte(`{"order":2}`)})
	enqueue(outbox.Message{ID: "m-3", Topic: "orders", Key: "cust-8", Payload: []byte(`{"order":3}`)})
	enqueue(outbox.Message{ID: "m-4", Topic: "mails", Payload: []byte{0xff, 0x00}})
	rolledBack := errors.New("the order failed")
	if err := inTx(ctx, func(tx TTx) error {
		if _, err := store.Enqueue(ctx, tx, outbox.Message{ID: "m-rb", Topic: "orders", Key: "cust-7"}); err != nil {
			return err
		}
		return rolledBack
	}); !errors.Is(err, rolledBack) {
		t.Fatalf("rolled back enqueue: %v", err)
	}

	// count counts sqlonce_outbox's rows matching cond, with "?" args.
	count := func(cond string, args ...any) int {
		t.Helper()
		q := "SELECT count(*) FROM sqlonce_outbox WHERE " + cond
		if k.tg.driver == "pgx" {
			for i := 1; strings.Contains(q, "?"); i++ {
				q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
			}
		}
		var n int
		if err := k.sdb.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	// relay runs a relay with p until the outbox's Stats satisfy until.
	relay := func(p outbox.PublisherFunc, until func(outbox.Stats) bool) {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- store.Relay(rctx, p, outbox.WithPollInterval(10*time.Millisecond)) }()
		deadline := time.Now().Add(time.Minute) // a hang's bound, not a timing claim
		for {
			st, err := store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if until(st) {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("the relay did not get there: %+v", st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-stopped; !errors.Is(err, context.Canceled) {
			t.Fatalf("relay: %v", err)
		}
	}
	var (
		mu        sync.Mutex
		published []string
	)
	publish := func(refuse string) outbox.PublisherFunc {
		return func(ctx context.Context, m outbox.Message) error {
			if m.ID == refuse {
				return outbox.Permanent(errors.New("orders: no such stream"))
			}
			mu.Lock()
			published = append(published, m.ID)
			mu.Unlock()
			return nil
		}
	}
	relay(publish("m-1"), func(st outbox.Stats) bool { return st.Parked == 1 && st.Sent == 2 })
	slices.Sort(published)
	if fmt.Sprint(published) != "[m-3 m-4]" {
		t.Fatalf("published %v, want m-3 and m-4 (m-1 refused, m-2 held back behind it)", published)
	}
	if n := count("state = 2"); n != 1 {
		t.Fatalf("%d parked rows, want 1", n)
	}

	// stats: the backlog (m-2), its age, the parked and the sent.
	r := k.run(t, "outbox", "stats").succeeds(t)
	for _, re := range []string{`(?m)^pending\s+1\s`, `(?m)^oldest pending\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC\s+\(enqueued \S+ ago`, `(?m)^parked\s+1\s.*outbox list --state parked`, `(?m)^sent\s+2\s`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("outbox stats: no %s in\n%s", re, r.stdout)
		}
	}
	st := decodeKey(t, k.run(t, "outbox", "stats", "--json").succeeds(t))
	if st["pending"] != 1.0 || st["parked"] != 1.0 || st["sent"] != 2.0 || st["oldest_pending"] == nil || st["oldest_pending_age_seconds"].(float64) < 0 {
		t.Fatalf("outbox stats --json: %v", st)
	}
	if got, want := fieldsOf(st), documented(t, "outbox", "stats"); !slices.Equal(got, want) {
		t.Errorf("outbox stats --json writes %v, -h documents %v", got, want)
	}
	r = k.run(t, "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^outbox: 1 pending \(the oldest enqueued \S+ ago\), 1 parked, 2 sent$`).MatchString(r.stdout) {
		t.Fatalf("stats does not count the outbox:\n%s", r.stdout)
	}

	// list, each state, a page at a time.
	r = k.run(t, "outbox", "list", "--state", "parked").succeeds(t)
	if !regexp.MustCompile(`(?m)^\d+\s+m-1\s+orders\s+cust-7\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+1\s+permanent: orders: no such stream\s*$`).MatchString(r.stdout) {
		t.Fatalf("outbox list --state parked:\n%s", r.stdout)
	}
	r = k.run(t, "outbox", "list", "--state", "pending").succeeds(t)
	if !regexp.MustCompile(`(?m)^\d+\s+m-2\s+orders\s+cust-7\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "m-1") || strings.Contains(r.stdout, "m-rb") {
		t.Fatalf("outbox list --state pending:\n%s", r.stdout)
	}
	sent := decodeKeys(t, k.run(t, "outbox", "list", "--state", "sent", "--json").succeeds(t))
	if len(sent) != 2 || sent[0]["id"] != "m-3" || sent[1]["id"] != "m-4" || sent[0]["sent"] == nil || sent[1]["key"] != "" || sent[1]["payload_bytes"] != 2.0 {
		t.Fatalf("outbox list --state sent --json: %v", sent)
	}
	r = k.run(t, "outbox", "list", "--state", "sent", "--limit", "1").succeeds(t)
	seq3 := int64(sent[0]["seq"].(float64))
	if !regexp.MustCompile(`(?m)^\d+\s+m-3\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "m-4") ||
		!strings.Contains(r.stdout, fmt.Sprintf("(the first 1; --after %d lists the next ones)", seq3)) {
		t.Fatalf("outbox list --state sent --limit 1:\n%s", r.stdout)
	}
	r = k.run(t, "outbox", "list", "--state", "sent", "--limit", "1", "--after", fmt.Sprint(seq3)).succeeds(t)
	if !regexp.MustCompile(`(?m)^\d+\s+m-4\s+mails\s+-\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "m-3") || strings.Contains(r.stdout, "--after") {
		t.Fatalf("outbox list --state sent --after %d:\n%s", seq3, r.stdout)
	}

	// get: the parked message, its error, headers and payload.
	r = k.run(t, "outbox", "get", "m-1").succeeds(t)
	for _, re := range []string{`(?m)^state\s+parked\s.*outbox redrive`, `(?m)^topic\s+orders$`, `(?m)^key\s+cust-7$`, `(?m)^attempts\s+1\s`,
		`(?m)^last error\s+permanent: orders: no such stream$`, `(?m)^headers\s+trace: t-1$`, `(?m)^payload\s+11 bytes: "\{\\"order\\":1\}"$`,
		`(?m)^created\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("outbox get: no %s in\n%s", re, r.stdout)
		}
	}
	r = k.run(t, "outbox", "get", "m-4").succeeds(t)
	if !regexp.MustCompile(`(?m)^payload\s+2 bytes \(binary`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^sent\s+\d{4}-`).MatchString(r.stdout) {
		t.Fatalf("outbox get of a sent binary message:\n%s", r.stdout)
	}
	m1 := decodeKey(t, k.run(t, "outbox", "get", "m-1", "--json").succeeds(t))
	if m1["state"] != "parked" || m1["attempts"] != 1.0 || m1["payload"] != "eyJvcmRlciI6MX0=" || fmt.Sprint(m1["headers"]) != "map[trace:t-1]" || m1["leased"] != false {
		t.Fatalf("outbox get --json: %v", m1)
	}
	k.run(t, "outbox", "get", "nope").failsWith(t, 3, `message "nope": not in the outbox`)
	k.run(t, "outbox", "get", "m-rb").failsWith(t, 3, "not in the outbox") // rolled back

	// redrive: only a parked message, then a relay publishes it and the
	// message it held back, in order.
	k.run(t, "outbox", "redrive", "m-2").failsWith(t, 4, `message "m-2" is pending, not parked`)
	k.run(t, "outbox", "redrive", "m-3").failsWith(t, 4, `message "m-3" is sent, not parked`)
	k.run(t, "outbox", "redrive", "nope").failsWith(t, 3, "not in the outbox")
	r = k.run(t, "outbox", "redrive", "m-1").succeeds(t)
	if !strings.Contains(r.stdout, `re-drove message "m-1"`) {
		t.Fatalf("outbox redrive: %s", r.stdout)
	}
	if n := count("id = ? AND state = 0 AND attempts = 0", "m-1"); n != 1 {
		t.Fatalf("m-1 after redrive: %d pending rows with attempts 0, want 1", n)
	}
	k.run(t, "outbox", "redrive", "m-1").failsWith(t, 4, `message "m-1" is pending, not parked`)
	r = k.run(t, "outbox", "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^pending\s+2\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^parked\s+0$`).MatchString(r.stdout) {
		t.Fatalf("outbox stats after redrive:\n%s", r.stdout)
	}
	published = nil
	relay(publish(""), func(st outbox.Stats) bool { return st.Sent == 4 })
	if fmt.Sprint(published) != "[m-1 m-2]" {
		t.Fatalf("after redrive the relay published %v, want m-1 then m-2", published)
	}
	if n := count("state = 1"); n != 4 {
		t.Fatalf("%d sent rows, want 4", n)
	}

	// forget: a pending message is never published; a sent one goes.
	enqueue(outbox.Message{ID: "m-5", Topic: "orders", Key: "cust-7"})
	r = k.run(t, "outbox", "forget", "m-5").succeeds(t)
	if !strings.Contains(r.stdout, `forgot pending message "m-5"`) {
		t.Fatalf("outbox forget: %s", r.stdout)
	}
	if n := count("id = ?", "m-5"); n != 0 {
		t.Fatalf("%d rows of m-5 after forget", n)
	}
	k.run(t, "outbox", "forget", "m-5").failsWith(t, 3, "not in the outbox")
	k.run(t, "outbox", "get", "m-5").failsWith(t, 3, "not in the outbox")
	fj := decodeKey(t, k.run(t, "outbox", "forget", "m-3", "--json").succeeds(t))
	if fj["id"] != "m-3" || fj["forgotten"] != true || fj["was"] != "sent" {
		t.Fatalf("outbox forget --json: %v", fj)
	}
	if got, want := fieldsOf(fj), documented(t, "outbox", "forget"); !slices.Equal(got, want) {
		t.Errorf("outbox forget --json writes %v, -h documents %v", got, want)
	}
	if n := count("id = ?", "m-3"); n != 0 {
		t.Fatalf("%d rows of m-3 after forget", n)
	}

	// A message a relay is publishing: get shows the lease, forget needs
	// --leased, and the relay's mark then changes nothing.
	enqueue(outbox.Message{ID: "m-6", Topic: "orders", Key: "cust-9"})
	entered, release := make(chan struct{}), make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() {
		stopped <- store.Relay(rctx, outbox.PublisherFunc(func(ctx context.Context, m outbox.Message) error {
			close(entered)
			<-release
			return nil
		}), outbox.WithPollInterval(10*time.Millisecond), outbox.WithLease(10*time.Minute))
	}()
	<-entered
	m6 := decodeKey(t, k.run(t, "outbox", "get", "m-6", "--json").succeeds(t))
	if m6["leased"] != true || m6["locked_until"] == nil || m6["state"] != "pending" {
		t.Fatalf("outbox get --json of a leased message: %v", m6)
	}
	if got, want := fieldsOf(m1, m6, sent[0]), documented(t, "outbox", "get"); !slices.Equal(got, want) {
		t.Errorf("outbox get --json writes %v, -h documents %v", got, want)
	}
	r = k.run(t, "outbox", "get", "m-6").succeeds(t)
	if !regexp.MustCompile(`(?m)^leased until\s+\d{4}-.*a relay is publishing it`).MatchString(r.stdout) {
		t.Fatalf("outbox get of a leased message:\n%s", r.stdout)
	}
	r = k.run(t, "outbox", "list", "--state", "pending").succeeds(t)
	if !regexp.MustCompile(`(?m)^\d+\s+m-6\s.*\suntil \d{4}-`).MatchString(r.stdout) {
		t.Fatalf("outbox list of a leased message:\n%s", r.stdout)
	}
	k.run(t, "outbox", "redrive", "m-6").failsWith(t, 4, "a relay is publishing it")
	k.run(t, "outbox", "forget", "m-6").failsWith(t, 4, "add --leased")
	if n := count("id = ?", "m-6"); n != 1 {
		t.Fatalf("%d rows of m-6 after a refused forget, want 1", n)
	}
	k.run(t, "outbox", "forget", "m-6", "--leased").succeeds(t)
	close(release)
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("relay: %v", err)
	}
	if n := count("id = ?", "m-6"); n != 0 {
		t.Fatalf("%d rows of m-6 after forget --leased and the relay's mark, want 0", n)
	}
	r = k.run(t, "outbox", "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^pending\s+0\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^sent\s+3\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^oldest pending\s+-$`).MatchString(r.stdout) {
		t.Fatalf("outbox stats at the end:\n%s", r.stdout)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox"}, "outbox takes stats, list, get, redrive or forget"},
		{[]string{"outbox", "drop"}, `outbox "drop"`},
		{[]string{"outbox", "list"}, "needs --state pending, sent or parked"},
		{[]string{"outbox", "list", "--state", "stuck"}, `--state "stuck"`},
		{[]string{"outbox", "list", "--state", "sent", "--limit", "0"}, "--limit 0 is outside 1..1000"},
		{[]string{"outbox", "list", "--state", "sent", "--limit", "1001"}, "--limit 1001"},
		{[]string{"outbox", "list", "--state", "sent", "--after", "-1"}, "--after -1"},
		{[]string{"outbox", "get"}, "one message ID"},
		{[]string{"outbox", "get", "a", "b"}, "one message ID"},
		{[]string{"outbox", "get", ""}, "message id is empty"},
		{[]string{"outbox", "stats", "x"}, "takes no arguments"},
		{[]string{"outbox", "forget", "m-1", "--frobnicate"}, "-frobnicate"},
	} {
		if tc.args[0] == "outbox" && len(tc.args) > 1 {
			k.run(t, tc.args...).failsWith(t, 2, tc.want)
		} else {
			sqlonce(t, tc.args...).failsWith(t, 2, tc.want)
		}
	}
	sqlonce(t, "outbox", "stats").failsWith(t, 2, "needs --db")
}
