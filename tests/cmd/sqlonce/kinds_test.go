package sqlonce_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	so "github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// kindsDB is a target with sqlonce's tables, where the command and the
// library meet: schema is --schema's value ("" for none), table the
// qualified sqlonce_keys for database/sql.
type kindsDB struct {
	tg     target
	schema string
	sdb    *sql.DB
	table  string
}

// args adds --db, and --schema when there is one, to a command line.
func (k kindsDB) args(args ...string) []string {
	args = append(args, "--db", k.tg.dsn)
	if k.schema != "" {
		args = append(args, "--schema", k.schema)
	}
	return args
}

func (k kindsDB) run(t *testing.T, args ...string) result {
	t.Helper()
	return sqlonce(t, k.args(args...)...)
}

// exec runs q with "?" placeholders, PostgreSQL's $n on pgx.
func (k kindsDB) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if k.tg.driver == "pgx" {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", fmt.Sprintf("$%d", i), 1)
		}
	}
	if _, err := k.sdb.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func newKindsDB(t *testing.T, tg target, schema string) kindsDB {
	sdb, err := sql.Open(tg.driver, tg.sqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	k := kindsDB{tg: tg, schema: schema, sdb: sdb, table: "sqlonce_keys"}
	if schema != "" {
		k.table = schema + ".sqlonce_keys"
	}
	k.run(t, "migrate", "up").succeeds(t)
	return k
}

func TestKindsSQLite(t *testing.T) {
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
	kinds(t, k, drv)
}

func TestKindsPostgres(t *testing.T) {
	k := newKindsDB(t, postgresTarget(t), "")
	kinds(t, k, testdrv.Pgx(t, pgxPool(t, k.tg.dsn)))
}

func TestKindsMySQL(t *testing.T) {
	tg := mysqlTarget(t)
	k := newKindsDB(t, tg, "")
	kinds(t, k, testdrv.MySQL(t, mysqlDB(t, tg.sqlDSN)))
}

// TestSchemaPostgres: with --schema every command reaches sqlonce's
// tables in a schema that is not the connection's (search_path's), as
// pgxdriver.WithSchema uses them, and never the connection's own.
func TestSchemaPostgres(t *testing.T) {
	tg := postgresTarget(t)
	schema := fmt.Sprintf("sqlonce_cli_%d", time.Now().UnixNano()%1e9)
	admin, err := sql.Open("pgx", tg.sqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE")
		admin.Close()
	})
	k := newKindsDB(t, tg, schema)
	where := func() string {
		var s []string
		rows, err := admin.Query(`SELECT table_schema FROM information_schema.tables WHERE table_name = 'sqlonce_keys' AND table_schema IN ($1, current_schema()) ORDER BY 1`, schema)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			_ = rows.Scan(&n)
			s = append(s, n)
		}
		return strings.Join(s, " ")
	}
	if got := where(); got != schema {
		t.Fatalf("migrate up --schema %s put sqlonce_keys in %q", schema, got)
	}
	kinds(t, k, testdrv.Pgx(t, pgxPool(t, tg.dsn), pgxdriver.WithSchema(schema)))
	schemaLifecycle(t, k)
}

// TestSchemaMySQL: --schema on MariaDB is another database than the
// DSN's, as mysqldriver.WithDatabase uses it.
func TestSchemaMySQL(t *testing.T) {
	tg := mysqlTarget(t)
	schema := fmt.Sprintf("sqlonce_cli_%d", time.Now().UnixNano()%1e9)
	admin := mysqlDB(t, tg.sqlDSN)
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + schema) })
	k := newKindsDB(t, tg, schema)
	var n int
	if err := admin.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name = 'sqlonce_keys' AND table_schema = ?`, schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("migrate up --schema %s: %d sqlonce_keys there (%v)", schema, n, err)
	}
	if err := admin.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_name = 'sqlonce_keys' AND table_schema = DATABASE()`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("migrate up --schema %s: %d sqlonce_keys in the DSN's database (%v)", schema, n, err)
	}
	kinds(t, k, testdrv.MySQL(t, mysqlDB(t, tg.sqlDSN), mysqldriver.WithDatabase(schema)))
	schemaLifecycle(t, k)
}

// schemaLifecycle: stats, purge and migrate status and down with
// --schema, and without it the connection's own tables (none).
func schemaLifecycle(t *testing.T, k kindsDB) {
	k.exec(t, `INSERT INTO `+k.table+` (namespace, scope, idempotency_key, state, token, created_at, expires_at) VALUES (0, 'old', 'k-1', 1, 1, ?, ?)`,
		expiredAt(k.tg.driver, -7200), expiredAt(k.tg.driver, -3600))
	r := k.run(t, "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^http\s+user-42\s+1\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^dedupe\s+old\s+1\s+0\s+1\s`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "sqlonce's tables in "+k.schema) {
		t.Fatalf("stats --schema:\n%s", r.stdout)
	}
	// The outbox's commands reach its table in the schema too.
	r = k.run(t, "outbox", "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^pending\s+0\s`).MatchString(r.stdout) {
		t.Fatalf("outbox stats --schema:\n%s", r.stdout)
	}
	k.run(t, "outbox", "get", "m-1").failsWith(t, 3, "not in the outbox")
	sqlonce(t, "outbox", "stats", "--db", k.tg.dsn).failsWith(t, 1, "sqlonce migrate up")
	r = k.run(t, "purge").succeeds(t)
	if !strings.Contains(r.stdout, "purged 1 expired keys") {
		t.Fatalf("purge --schema:\n%s", r.stdout)
	}
	r = k.run(t, "demo", "--orders", "2").succeeds(t)
	demoReport(t, r, 2)
	// Without --schema the command looks where the connection does.
	sqlonce(t, "stats", "--db", k.tg.dsn).failsWith(t, 1, "sqlonce migrate up")
	r = k.run(t, "migrate", "status").succeeds(t)
	if len(regexp.MustCompile(`(?m)\sapplied\s+\d{4}-`).FindAllString(r.stdout, -1)) != 4 {
		t.Fatalf("migrate status --schema:\n%s", r.stdout)
	}
	k.run(t, "migrate", "down").succeeds(t)
	r = k.run(t, "migrate", "status").succeeds(t)
	if strings.Count(r.stdout, "pending") != 1 {
		t.Fatalf("migrate status --schema after down:\n%s", r.stdout)
	}
	r = k.run(t, "migrate", "up").succeeds(t)
	if !strings.Contains(r.stdout, "applied 00004_sqlonce_outbox.sql") || strings.Contains(r.stdout, "00001") {
		t.Fatalf("migrate up --schema after down:\n%s", r.stdout)
	}
	sqlonce(t, "stats", "--db", k.tg.dsn, "--schema", "Not-A-Name").failsWith(t, 2, "--schema")
}

// expiredAt is now plus s seconds as a value sqlonce_keys takes.
func expiredAt(driver string, s int) any {
	at := time.Now().Add(time.Duration(s) * time.Second).UTC()
	if driver == "sqlite" {
		return at.UnixMicro()
	}
	return at
}

func pgxPool(t *testing.T, dsn string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func mysqlDB(t *testing.T, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// keyObj is a key as --json writes it, every field kept.
type keyObj map[string]any

func decodeKeys(t *testing.T, r result) []keyObj {
	t.Helper()
	var ks []keyObj
	if err := json.Unmarshal([]byte(r.stdout), &ks); err != nil {
		t.Fatalf("sqlonce %q: %v\n%s", r.args, err, r.stdout)
	}
	return ks
}

func decodeKey(t *testing.T, r result) keyObj {
	t.Helper()
	var k keyObj
	if err := json.Unmarshal([]byte(r.stdout), &k); err != nil {
		t.Fatalf("sqlonce %q: %v\n%s", r.args, err, r.stdout)
	}
	return k
}

// documented returns the JSON fields a command's -h lists.
func documented(t *testing.T, cmd ...string) []string {
	t.Helper()
	r := sqlonce(t, append(cmd, "-h")...).succeeds(t)
	_, sec, ok := strings.Cut(r.stdout, "\nJSON fields")
	if !ok {
		t.Fatalf("%s -h documents no JSON fields:\n%s", strings.Join(cmd, " "), r.stdout)
	}
	_, sec, _ = strings.Cut(sec, "\n")
	sec, _, _ = strings.Cut(sec, "\n\n")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z_]+)\s`).FindAllStringSubmatch(sec, -1) {
		names = append(names, m[1])
	}
	sort.Strings(names)
	return names
}

func fieldsOf(objs ...keyObj) []string {
	var names []string
	for _, o := range objs {
		for n := range o {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

// kinds: support reaches every kind of key from the command, through the
// library as an application writes its keys: a customer's Idempotency-Key
// recorded by a real httpidem request is found with --kind http and the
// principal, forgotten, and the customer's repeat then runs again; an
// inbox message is found by its consumer and replayed; a stopped
// operation of several steps shows where it stopped and is forgotten; a
// scope holding keys of another kind than asked says so.
func kinds[TTx any](t *testing.T, k kindsDB, drv so.Driver[TTx]) {
	ctx := context.Background()

	// An httpidem middleware, keys per X-User principal.
	var charges atomic.Int64
	m, err := httpidem.New(drv, func(r *http.Request) string { return r.Header.Get("X-User") })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		fmt.Fprintf(w, "charge %d", n)
	})))
	defer srv.Close()
	pay := func() (string, bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"amount":100}`))
		req.Header.Set("X-User", "user-42")
		req.Header.Set("Idempotency-Key", `"pay-8e2f"`)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /pay: %d %s", resp.StatusCode, body)
		}
		return body, resp.Header.Get(httpidem.ReplayHeader) == "true"
	}
	if body, replayed := pay(); body != "charge 1" || replayed {
		t.Fatalf("first request: %q replayed %v", body, replayed)
	}
	if body, replayed := pay(); body != "charge 1" || !replayed {
		t.Fatalf("repeat: %q replayed %v", body, replayed)
	}

	// Support looks the customer's key up by the principal.
	got := decodeKey(t, k.run(t, "keys", "get", "--kind", "http", "--scope", "user-42", "pay-8e2f", "--json").succeeds(t))
	if got["kind"] != "http" || got["scope"] != "user-42" || got["key"] != "pay-8e2f" || got["state"] != "done" || got["response"] != true {
		t.Fatalf("keys get --kind http: %v", got)
	}
	// Without --kind too: every kind holding the key answers.
	r := k.run(t, "keys", "get", "--scope", "user-42", "pay-8e2f").succeeds(t)
	if !regexp.MustCompile(`(?m)^kind\s+http$`).MatchString(r.stdout) {
		t.Fatalf("keys get without --kind:\n%s", r.stdout)
	}
	// Asked as another kind, the answer names the kind that holds it.
	k.run(t, "keys", "get", "--kind", "dedupe", "--scope", "user-42", "pay-8e2f").failsWith(t, 3, "--kind http reaches it")
	r = k.run(t, "keys", "list", "--scope", "user-42").succeeds(t)
	if !regexp.MustCompile(`(?m)^http\s+pay-8e2f\s+done\s`).MatchString(r.stdout) {
		t.Fatalf("keys list --scope user-42:\n%s", r.stdout)
	}
	r = k.run(t, "keys", "list", "--kind", "dedupe", "--scope", "user-42").succeeds(t)
	if !strings.Contains(r.stdout, "(no keys)") || !strings.Contains(r.stderr, `scope "user-42" also holds 1 http key (--kind http)`) {
		t.Fatalf("keys list --kind dedupe --scope user-42:\n%s\nstderr: %s", r.stdout, r.stderr)
	}
	// Forgotten, the customer's repeat runs the handler again.
	r = k.run(t, "keys", "forget", "--kind", "http", "--scope", "user-42", "pay-8e2f", "--json").succeeds(t)
	if f := decodeKey(t, r); f["kind"] != "http" || f["forgotten"] != true {
		t.Fatalf("keys forget --json: %s", r.stdout)
	}
	if body, replayed := pay(); body != "charge 2" || replayed {
		t.Fatalf("repeat after forget: %q replayed %v", body, replayed)
	}
	if body, replayed := pay(); body != "charge 2" || !replayed {
		t.Fatalf("repeat of the repeat: %q replayed %v", body, replayed)
	}
	if got := charges.Load(); got != 2 {
		t.Fatalf("%d charges, want 2", got)
	}

	// grpcidem's keys share httpidem's namespace, scoped apart ("g:"
	// before the principal, as grpcidem writes them).
	k.exec(t, `INSERT INTO `+k.table+` (namespace, scope, idempotency_key, fingerprint, response, state, token, created_at, expires_at) VALUES (2, 'g:user-42', 'rpc-1', ?, ?, 1, 1, ?, ?)`,
		[]byte("fp"), []byte("resp"), expiredAt(k.tg.driver, -60), expiredAt(k.tg.driver, 3600))
	r = k.run(t, "keys", "list", "--scope", "user-42").succeeds(t)
	if !regexp.MustCompile(`(?m)^http\s+pay-8e2f\s+done\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^grpc\s+rpc-1\s+done\s`).MatchString(r.stdout) {
		t.Fatalf("keys list --scope user-42 with a grpc key:\n%s", r.stdout)
	}
	r = k.run(t, "stats").succeeds(t)
	if !regexp.MustCompile(`(?m)^grpc\s+user-42\s+1\s`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^http\s+user-42\s+1\s`).MatchString(r.stdout) {
		t.Fatalf("stats names kinds and principals:\n%s", r.stdout)
	}
	k.run(t, "keys", "forget", "--kind", "grpc", "--scope", "user-42", "rpc-1").succeeds(t)
	k.run(t, "keys", "get", "--kind", "grpc", "--scope", "user-42", "rpc-1").failsWith(t, 3, "not found as a grpc key")

	// An inbox message, found by its consumer, forgotten, applied again.
	in, err := inbox.New(drv, "ledger-writer")
	if err != nil {
		t.Fatal(err)
	}
	var applied int
	handle := func() so.Result {
		res, err := in.Handle(ctx, "evt-991", func(context.Context, TTx) error { applied++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	handle()
	if res := handle(); !res.AlreadyDone() || applied != 1 {
		t.Fatalf("redelivery: %+v, applied %d", res, applied)
	}
	ks := decodeKeys(t, k.run(t, "keys", "list", "--scope", "ledger-writer", "--json").succeeds(t))
	if len(ks) != 1 || ks[0]["kind"] != "inbox" || ks[0]["key"] != "evt-991" || ks[0]["state"] != "done" {
		t.Fatalf("keys list --scope ledger-writer: %v", ks)
	}
	r = k.run(t, "keys", "forget", "--scope", "ledger-writer", "evt-991").succeeds(t)
	if !strings.Contains(r.stdout, `forgot inbox key "evt-991"`) {
		t.Fatalf("keys forget of an inbox message: %s", r.stdout)
	}
	if res := handle(); res.AlreadyDone() || applied != 2 {
		t.Fatalf("redelivery after forget: %+v, applied %d", res, applied)
	}

	// A stopped operation of several steps (its lapsed lease holds where
	// it stopped), and a dedupe lease on the
	// same scope and key.
	store, err := dedupe.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	var reserved int
	failCharge := true
	op := &dedupe.Operation[TTx]{Name: "checkout", Lease: time.Minute, Steps: []dedupe.Step[TTx]{
		{Name: "reserve", Outside: func(context.Context, dedupe.StepState) ([]byte, error) { reserved++; return []byte("r"), nil }},
		{Name: "charge", Outside: func(context.Context, dedupe.StepState) ([]byte, error) {
			if failCharge {
				return nil, errors.New("card network down")
			}
			return []byte("paid"), nil
		}},
	}}
	// An operation given up by the resumer after its attempts: which
	// step stopped it, after how many attempts, its error and when.
	if _, err := store.RunSteps(ctx, dedupe.Request{Scope: "cust-9", Key: "order-2"}, []byte("in"), op); err == nil {
		t.Fatal("the failing step did not stop the operation")
	}
	if done, failed, err := store.ResumeStuck(ctx, 1, op); done != 0 || failed != 1 || err != nil {
		t.Fatalf("ResumeStuck: %d done, %d given up, %v", done, failed, err)
	}
	reserved = 0
	gaveUp := decodeKey(t, k.run(t, "keys", "get", "--kind", "steps", "--scope", "cust-9", "order-2", "--json").succeeds(t))
	if gaveUp["failed_step"] != "charge" || gaveUp["attempts"] != float64(1) || gaveUp["failed"] != "card network down" || gaveUp["failed_at"] == nil || gaveUp["state"] != "done" {
		t.Fatalf("keys get --kind steps of a given-up operation: %v", gaveUp)
	}
	r = k.run(t, "keys", "get", "--kind", "steps", "--scope", "cust-9", "order-2").succeeds(t)
	if !regexp.MustCompile(`(?m)^failed step\s+charge$`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^given up at\s+\d{4}-`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^operation\s+checkout\s+\(1 attempts\)$`).MatchString(r.stdout) {
		t.Fatalf("keys get of an operation given up by the resumer:\n%s", r.stdout)
	}
	req := dedupe.Request{Scope: "cust-9", Key: "order-1"}
	if _, err := store.RunSteps(ctx, req, []byte("in"), op); err == nil {
		t.Fatal("the failing step did not stop the operation")
	}
	lease, _, err := store.Claim(ctx, req, time.Minute)
	if err != nil || lease == nil {
		t.Fatalf("claim: %v", err)
	}
	// A given-up operation, as ResumeStuck leaves one: 0x13, then the
	// operation's name (its length, a uvarint), then the reason.
	k.exec(t, `INSERT INTO `+k.table+` (namespace, scope, idempotency_key, fingerprint, response, state, token, created_at, expires_at) VALUES (4, 'cust-9', 'order-0', ?, ?, 1, 3, ?, ?)`,
		[]byte{}, append([]byte{0x13, byte(len("checkout"))}, "checkoutcard declined 3 times"...), expiredAt(k.tg.driver, -60), expiredAt(k.tg.driver, 3600))

	stopped := decodeKey(t, k.run(t, "keys", "get", "--kind", "steps", "--scope", "cust-9", "order-1", "--json").succeeds(t))
	if stopped["kind"] != "steps" || stopped["operation"] != "checkout" || fmt.Sprint(stopped["steps_done"]) != "[reserve]" || stopped["attempts"] != float64(1) || stopped["state"] != "lapsed" {
		t.Fatalf("keys get --kind steps: %v", stopped)
	}
	r = k.run(t, "keys", "get", "--kind", "steps", "--scope", "cust-9", "order-0").succeeds(t)
	if !regexp.MustCompile(`(?m)^given up\s+card declined 3 times\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^operation\s+checkout$`).MatchString(r.stdout) || strings.Contains(r.stdout, "steps done") {
		t.Fatalf("keys get of a given-up operation:\n%s", r.stdout)
	}
	// Two kinds hold order-1: forget must be told which.
	k.run(t, "keys", "forget", "--scope", "cust-9", "order-1").failsWith(t, 2, "name the one to forget with --kind")
	// The failed step let the lease lapse, for a retry or the resumer.
	k.run(t, "keys", "forget", "--kind", "steps", "--scope", "cust-9", "order-1").succeeds(t)
	failCharge = false
	res, err := store.RunSteps(ctx, req, []byte("in"), op)
	if err != nil || res.AlreadyDone() || string(res.Response) != "paid" || reserved != 2 {
		t.Fatalf("RunSteps after forget: %+v %v, reserved %d times", res, err, reserved)
	}
	// The dedupe lease was left alone.
	got = decodeKey(t, k.run(t, "keys", "get", "--kind", "dedupe", "--scope", "cust-9", "order-1", "--json").succeeds(t))
	if got["state"] != "leased" || got["lease_until"] == nil {
		t.Fatalf("the dedupe lease after forgetting the operation: %v", got)
	}

	// The JSON fields printed (a lease, a done and a given-up operation,
	// the stopped one above) are those -h documents, every one of them.
	ks = decodeKeys(t, k.run(t, "keys", "list", "--scope", "cust-9", "--json").succeeds(t))
	if len(ks) != 4 {
		t.Fatalf("keys list --scope cust-9: %v", ks)
	}
	if printed, want := fieldsOf(append(ks, stopped)...), documented(t, "keys", "get"); !slices.Equal(printed, want) {
		t.Errorf("keys get/list --json print %v, keys get -h documents %v", printed, want)
	}
	r = k.run(t, "keys", "forget", "--kind", "dedupe", "--scope", "cust-9", "order-1", "--leased", "--json").succeeds(t)
	if printed, want := fieldsOf(decodeKey(t, r)), documented(t, "keys", "forget"); !slices.Equal(printed, want) {
		t.Errorf("keys forget --json prints %v, keys forget -h documents %v", printed, want)
	}

	stepsStatesAndRedrive(t, k, store, op, &failCharge, &reserved)
}

// stepsStatesAndRedrive: keys list --kind steps --state lists operations
// running, stopped, failed (given up) and done; keys redrive turns a
// given-up one back into a stopped one, once, and its next run goes on
// from where it stopped; a key not given up is refused (4), none is not
// found (3).
func stepsStatesAndRedrive[TTx any](t *testing.T, k kindsDB, store *dedupe.Store[TTx], op *dedupe.Operation[TTx], failCharge *bool, reserved *int) {
	ctx := context.Background()
	req := func(key string) dedupe.Request { return dedupe.Request{Scope: "cust-10", Key: key} }
	*failCharge = true
	if _, err := store.RunSteps(ctx, req("fail-1"), []byte("in"), op); err == nil {
		t.Fatal("the failing step did not stop the operation")
	}
	if done, failed, err := store.ResumeStuck(ctx, 1, op); done != 0 || failed != 1 || err != nil {
		t.Fatalf("ResumeStuck: %d done, %d given up, %v", done, failed, err)
	}
	if _, err := store.RunSteps(ctx, req("stop-1"), []byte("in"), op); err == nil {
		t.Fatal("the failing step did not stop the operation")
	}
	// A run whose context ends in its step holds its lease until it lapses.
	runCtx, cancel := context.WithCancel(ctx)
	hold := &dedupe.Operation[TTx]{Name: "hold", Lease: time.Hour, Steps: []dedupe.Step[TTx]{
		{Name: "wait", Outside: func(ctx context.Context, _ dedupe.StepState) ([]byte, error) { cancel(); return nil, ctx.Err() }},
	}}
	if _, err := store.RunSteps(runCtx, req("run-1"), nil, hold); !errors.Is(err, context.Canceled) {
		t.Fatalf("the held run: %v", err)
	}
	*failCharge = false
	if _, err := store.RunSteps(ctx, req("done-1"), []byte("in"), op); err != nil {
		t.Fatal(err)
	}
	list := func(state string) []string {
		var names []string
		for _, o := range decodeKeys(t, k.run(t, "keys", "list", "--kind", "steps", "--scope", "cust-10", "--state", state, "--json").succeeds(t)) {
			names = append(names, fmt.Sprint(o["key"]))
		}
		return names
	}
	for state, want := range map[string][]string{"running": {"run-1"}, "stopped": {"stop-1"}, "failed": {"fail-1"}, "done": {"done-1"}, "": {"done-1", "fail-1", "run-1", "stop-1"}} {
		if got := list(state); !slices.Equal(got, want) {
			t.Errorf("keys list --kind steps --state %q: %v, want %v", state, got, want)
		}
	}
	r := k.run(t, "keys", "list", "--kind", "steps", "--scope", "cust-10", "--state", "failed").succeeds(t)
	if !regexp.MustCompile(`(?m)^steps\s+fail-1\s+failed\s`).MatchString(r.stdout) {
		t.Errorf("keys list --state failed:\n%s", r.stdout)
	}
	k.run(t, "keys", "list", "--scope", "cust-10", "--state", "failed").failsWith(t, 2, "--kind steps")

	// Re-drive the given-up operation: once.
	r = k.run(t, "keys", "redrive", "--kind", "steps", "--scope", "cust-10", "fail-1", "--json").succeeds(t)
	got := decodeKey(t, r)
	if got["redriven"] != true || got["key"] != "fail-1" || got["kind"] != "steps" {
		t.Fatalf("keys redrive --json: %v", got)
	}
	if printed, want := fieldsOf(got), documented(t, "keys", "redrive"); !slices.Equal(printed, want) {
		t.Errorf("keys redrive --json prints %v, keys redrive -h documents %v", printed, want)
	}
	k.run(t, "keys", "redrive", "--scope", "cust-10", "fail-1").failsWith(t, 4, "stopped")
	for _, key := range []string{"done-1", "run-1", "stop-1"} {
		k.run(t, "keys", "redrive", "--kind", "steps", "--scope", "cust-10", key).failsWith(t, 4, "not re-driven")
	}
	k.run(t, "keys", "redrive", "--kind", "steps", "--scope", "cust-10", "nope").failsWith(t, 3, "not found")
	k.run(t, "keys", "redrive", "--kind", "dedupe", "--scope", "cust-10", "fail-1").failsWith(t, 2, "--kind steps")
	if got := list("stopped"); !slices.Equal(got, []string{"fail-1", "stop-1"}) {
		t.Errorf("keys list --state stopped after the redrive: %v", got)
	}
	stopped := decodeKey(t, k.run(t, "keys", "get", "--kind", "steps", "--scope", "cust-10", "fail-1", "--json").succeeds(t))
	if fmt.Sprint(stopped["steps_done"]) != "[reserve]" || stopped["failed"] != nil || stopped["state"] != "lapsed" {
		t.Fatalf("keys get of the re-driven operation: %v", stopped)
	}
	// Its next run goes on from the charge: the reservation is not made again.
	before := *reserved
	res, err := store.RunSteps(ctx, req("fail-1"), []byte("in"), op)
	if err != nil || res.AlreadyDone() || string(res.Response) != "paid" || *reserved != before {
		t.Fatalf("RunSteps after redrive: %+v %v, reserved %d more times", res, err, *reserved-before)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJSONFieldsInPackageDoc: the package doc lists the fields keys get
// -h documents (which kinds asserts are the ones printed).
func TestJSONFieldsInPackageDoc(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "cmd", "sqlonce", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "// # JSON\n")
	if !ok {
		t.Fatal("cmd/sqlonce/doc.go has no JSON section")
	}
	sec, _, _ = strings.Cut(sec, "// keys forget --json")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^//\t([a-z_]+)\s`).FindAllStringSubmatch(sec, -1) {
		names = append(names, m[1])
	}
	sort.Strings(names)
	if want := documented(t, "keys", "get"); !slices.Equal(names, want) {
		t.Errorf("the package doc lists %v, keys get -h %v", names, want)
	}
	for _, f := range documented(t, "keys", "forget") {
		if !strings.Contains(sec+string(b), `"`+f+`"`) {
			t.Errorf("the package doc does not name keys forget's field %q", f)
		}
	}

	// The outbox's message fields, then the other outbox commands'.
	_, sec, ok = strings.Cut(string(b), "// outbox get --json writes")
	if !ok {
		t.Fatal("cmd/sqlonce/doc.go does not document outbox get --json")
	}
	rest := sec
	sec, _, _ = strings.Cut(sec, "// outbox stats --json")
	names = nil
	for _, m := range regexp.MustCompile(`(?m)^//\t([a-z_]+)\s`).FindAllStringSubmatch(sec, -1) {
		names = append(names, m[1])
	}
	sort.Strings(names)
	if want := documented(t, "outbox", "get"); !slices.Equal(names, want) {
		t.Errorf("the package doc lists %v for outbox get, its -h %v", names, want)
	}
	for _, cmd := range []string{"stats", "redrive", "forget"} {
		for _, f := range documented(t, "outbox", cmd) {
			if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(rest, "//", "")), " "), `"`+f+`"`) {
				t.Errorf("the package doc does not name outbox %s's field %q", cmd, f)
			}
		}
	}
}
