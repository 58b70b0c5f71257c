// Package sqlonce_test drives the sqlonce command as a user does: it builds
// the binary once and runs it against a fresh SQLite file, PostgreSQL
// schema and MariaDB database, reading only its exit status and output.
package sqlonce_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sqlonce-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sqlonce")
	build := exec.Command("go", "build", "-o", bin, "github.com/sqlonce/sqlonce/cmd/sqlonce")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sqlonce:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	args           []string
	code           int
	stdout, stderr string
	took           time.Duration
}

// sqlonce runs the binary with args, without $SQLONCE_DB.
func sqlonce(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "SQLONCE_DB=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errOut.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sqlonce %q: %v", args, err)
	}
	return r
}

// succeeds fails t unless the command exited 0.
func (r result) succeeds(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("sqlonce %q: exit %d\nstdout:\n%s\nstderr:\n%s", r.args, r.code, r.stdout, r.stderr)
	}
	return r
}

// failsWith fails t unless the command exited with code and said exactly
// one line on stderr, containing want, and nothing a crash would print.
func (r result) failsWith(t *testing.T, code int, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	switch {
	case r.code != code:
		t.Errorf("sqlonce %q: exit %d, want %d; stderr %q", r.args, r.code, code, r.stderr)
	case len(lines) != 1 || !strings.HasPrefix(lines[0], "sqlonce: "):
		t.Errorf("stderr is not one 'sqlonce: ' line: %q", r.stderr)
	case !strings.Contains(r.stderr, want):
		t.Errorf("stderr %q does not say %q", r.stderr, want)
	case strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic"):
		t.Errorf("stderr looks like a crash: %q", r.stderr)
	}
}

// target is a fresh database and how the command and database/sql reach it.
type target struct {
	dsn     string // for the command
	driver  string // database/sql driver name
	sqlDSN  string // for database/sql
	expired string // inserts an expired key: scope, key, token
}

// The targets' DSNs take each form a driver's users write: the lifecycle
// runs on the plainest (a SQLite path, a PostgreSQL URL, go-sql-driver's
// user@tcp(host)/db), keys on the others (sqlite://, key=value, mysql://).

func sqliteTarget(t *testing.T) target {
	// An application's database file, without sqlonce's tables yet.
	path := testdb.EmptySQLite(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return target{
		dsn: path, driver: "sqlite", sqlDSN: path,
		expired: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES (?, ?, 1, ?, (unixepoch() - 7200) * 1000000, (unixepoch() - 3600) * 1000000)`,
	}
}

func postgresTarget(t *testing.T) target {
	_, dsn := testdb.EmptyPostgres(t)
	return target{
		dsn: dsn, driver: "pgx", sqlDSN: dsn,
		expired: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES ($1, $2, 1, $3, now() - interval '2 hours', now() - interval '1 hour')`,
	}
}

func mysqlTarget(t *testing.T) target {
	_, dsn := testdb.EmptyMySQL(t)
	return target{
		dsn: dsn, driver: "mysql", sqlDSN: dsn,
		expired: `INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
			VALUES (?, ?, 1, ?, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)`,
	}
}

// keyValue is tg's PostgreSQL URL as a key=value DSN.
func keyValue(t *testing.T, tg target) target {
	cfg, err := pgconn.ParseConfig(tg.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tg.dsn = fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable search_path=%s",
		cfg.Host, cfg.Port, cfg.User, cfg.Database, cfg.RuntimeParams["search_path"])
	if cfg.Password != "" {
		tg.dsn += " password=" + cfg.Password
	}
	return tg
}

func TestSQLite(t *testing.T)   { lifecycle(t, sqliteTarget(t)) }
func TestPostgres(t *testing.T) { lifecycle(t, postgresTarget(t)) }
func TestMySQL(t *testing.T)    { lifecycle(t, mysqlTarget(t)) }

// lifecycle takes an empty database through everything an operator does:
// status, a refused stats before migrating, migrate up (twice), the demo,
// stats and purge of expired keys, migrate down.
func lifecycle(t *testing.T, tg target) {
	db := tg.dsn

	r := sqlonce(t, "migrate", "status", "--db", db).succeeds(t)
	if strings.Count(r.stdout, "pending") != 4 {
		t.Fatalf("status of an empty database:\n%s", r.stdout)
	}
	sqlonce(t, "stats", "--db", db).failsWith(t, 1, "sqlonce migrate up")
	sqlonce(t, "purge", "--db", db).failsWith(t, 1, "sqlonce migrate up")

	r = sqlonce(t, "migrate", "up", "--db", db).succeeds(t)
	if !strings.Contains(r.stdout, "applied 00001_sqlonce_keys.sql") || !strings.Contains(r.stdout, "applied 00002_sqlonce_tokens.sql") ||
		!strings.Contains(r.stdout, "applied 00003_sqlonce_keys_namespace.sql") || !strings.Contains(r.stdout, "applied 00004_sqlonce_outbox.sql") {
		t.Fatalf("migrate up:\n%s", r.stdout)
	}
	r = sqlonce(t, "migrate", "--db", db, "up").succeeds(t)
	if !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("second migrate up:\n%s", r.stdout)
	}

	r = sqlonce(t, "demo", "--db", db, "--orders", "6", "--keep").succeeds(t)
	demoReport(t, r, 6)

	// Expired keys, as an application leaves them behind.
	sdb, err := sql.Open(tg.driver, tg.sqlDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	const expired = 25
	for i := range expired {
		if _, err := sdb.Exec(tg.expired, "old-requests", fmt.Sprint("k-", i), i+1); err != nil {
			t.Fatal(err)
		}
	}
	r = sqlonce(t, "stats", "--db", db).succeeds(t)
	if !regexp.MustCompile(`(?m)^dedupe\s+old-requests\s+25\s+0\s+25\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)/checkout\s+12\s+0\s+0\s`).MatchString(r.stdout) {
		t.Fatalf("stats:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "tokens: 6 issued and kept, 6 consumed, 0 expired") {
		t.Fatalf("stats, tokens:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "outbox: 0 pending, 0 parked, 0 sent") {
		t.Fatalf("stats, outbox:\n%s", r.stdout)
	}

	r = sqlonce(t, "purge", "--db", db, "--batch", "10").succeeds(t)
	if !strings.Contains(r.stdout, "purged 25 expired keys") || !strings.Contains(r.stdout, "purged 0 expired tokens") {
		t.Fatalf("purge:\n%s", r.stdout)
	}
	if got := strings.Count(r.stderr, "purging expired keys: "); got != 3 {
		t.Fatalf("purge reported %d batches of 10, 10 and 5, want 3:\n%s", got, r.stderr)
	}
	// --batch 0 takes the default, as a batch of 0 does in the library.
	if r := sqlonce(t, "purge", "--db", db, "--batch", "0").succeeds(t); !strings.Contains(r.stdout, "purged 0 expired keys") {
		t.Fatalf("purge --batch 0:\n%s", r.stdout)
	}
	var left int64
	if err := sdb.QueryRow("SELECT count(*) FROM sqlonce_keys WHERE scope = 'old-requests'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d expired keys left after purge (%v)", left, err)
	}
	r = sqlonce(t, "purge", "--db", db).succeeds(t)
	if !strings.Contains(r.stdout, "purged 0 expired keys") {
		t.Fatalf("second purge:\n%s", r.stdout)
	}

	sqlonce(t, "migrate", "down", "--db", db).succeeds(t)
	sqlonce(t, "migrate", "down", "--db", db).succeeds(t)
	sqlonce(t, "migrate", "down", "--db", db).succeeds(t)
	sqlonce(t, "migrate", "down", "--db", db).succeeds(t)
	r = sqlonce(t, "migrate", "status", "--db", db).succeeds(t)
	if strings.Count(r.stdout, "pending") != 4 {
		t.Fatalf("status after migrating down:\n%s", r.stdout)
	}
}

// demoReport checks the demo's table and its proofs, for orders checkouts
// per scenario.
func demoReport(t *testing.T, r result, orders int) {
	t.Helper()
	for _, what := range []string{"dedupe", "inbox", "statemachine", "unique", "optimistic", "dedupe lease", "token"} {
		if !regexp.MustCompile(`(?m)^  ok   ` + regexp.QuoteMeta(what) + `\s`).MatchString(r.stdout) {
			t.Errorf("no proof line for %s", what)
		}
	}
	if strings.Contains(r.stdout, "FAIL") {
		t.Errorf("a proof failed")
	}
	n := orders
	for _, row := range []string{
		fmt.Sprintf(`Pay double-clicked \(3 clicks\)\s+dedupe\s+%d\s+%d\s+%d\s+%d\s+-\s+%d orders, %d payments`, 3*n, n, 2*n, 2*n, n, n),
		fmt.Sprintf(`two instances ship orders\s+statemachine\s+%d\s+%d\s+%d\s+-\s+-\s+%d shipments`, 4*n, 2*n, 2*n, 2*n),
		fmt.Sprintf(`coupon applied twice\s+unique\s+%d\s+%d\s+%d\s+-\s+-\s+%d coupon uses`, 2*n, n, n, n),
		fmt.Sprintf(`refund form sent twice\s+token\s+%d\s+%d\s+%d\s+-\s+-\s+%d refunds`, 2*n, n, n, n),
		`card charged by two workers\s+dedupe lease\s+\d+\s+\d+\s+\d+\s+\d+\s+1 worker killed\s+`,
	} {
		if !regexp.MustCompile(row).MatchString(r.stdout) {
			t.Errorf("no table row matching %q", row)
		}
	}
	// The errors an Observer saw are the failures the demo staged, and it
	// says so: the crashes and timeouts of the table, and no other.
	crashes := regexp.MustCompile(`client retries after timeouts\s+dedupe\s+\d+\s+\d+\s+\d+\s+\d+\s+(\d+) crashes\s`).FindStringSubmatch(r.stdout)
	timeouts := regexp.MustCompile(`broker redelivers events\s+inbox\s+\d+\s+\d+\s+\d+\s+-\s+(\d+) timeouts\s`).FindStringSubmatch(r.stdout)
	dedupeErrs := regexp.MustCompile(`(?m)^dedupe\s+(\d+)\s`).FindStringSubmatch(r.stdout)
	inboxErrs := regexp.MustCompile(`(?m)^inbox\s+(\d+)\s`).FindStringSubmatch(r.stdout)
	switch {
	case crashes == nil || timeouts == nil:
		t.Errorf("the table does not show the staged crashes and timeouts")
	case dedupeErrs == nil || inboxErrs == nil:
		t.Errorf("the Observer's table has no dedupe or inbox row")
	case crashes[1] != dedupeErrs[1] || timeouts[1] != inboxErrs[1]:
		t.Errorf("errors seen (dedupe %s, inbox %s) are not the crashes (%s) and timeouts (%s) staged",
			dedupeErrs[1], inboxErrs[1], crashes[1], timeouts[1])
	default:
		// The demo names only the kinds of failure it staged at least
		// once: a run without a timeout says nothing of timeouts.
		var parts []string
		if crashes[1] != "0" {
			parts = append(parts, crashes[1]+" checkouts crashed before their commit (dedupe)")
		}
		if timeouts[1] != "0" {
			parts = append(parts, timeouts[1]+" receipt mails timed out (inbox)")
		}
		if len(parts) == 0 {
			break
		}
		want := strings.Join(parts, " and ")
		if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), want) {
			t.Errorf("the demo does not say its errors were staged: no %q", want)
		}
		if !strings.Contains(r.stdout, "failures the demo staged, not bugs") {
			t.Errorf("the demo does not say its staged failures are not bugs")
		}
	}
	if t.Failed() {
		t.Fatalf("demo output:\n%s", r.stdout)
	}
}

// The command a newcomer runs first: no flags, an embedded SQLite file in
// a temporary directory, done in seconds.
func TestDemoDefault(t *testing.T) {
	r := sqlonce(t, "demo").succeeds(t)
	demoReport(t, r, 30)
	if !strings.Contains(r.stdout, "on SQLite file "+os.TempDir()) {
		t.Errorf("the default demo does not say it runs on a temporary SQLite file:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr without a terminal: %q", r.stderr)
	}
	if r.took > 30*time.Second {
		t.Errorf("the default demo took %v", r.took)
	}
	t.Logf("sqlonce demo took %v", r.took)
}

func TestBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"demo", "--db", "redis://127.0.0.1:6379"}, 1, `unknown DSN scheme "redis"`},
		{[]string{"stats", "--db", "127.0.0.1:5432"}, 1, "is not a DSN"},
		{[]string{"stats", "--db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable"}, 1, "cannot reach PostgreSQL at 127.0.0.1:1"},
		{[]string{"stats", "--db", "host=127.0.0.1 port=1 user=postgres password=hunter2 dbname=test"}, 1, "cannot reach PostgreSQL at 127.0.0.1:1"},
		{[]string{"stats", "--db", "root@tcp(127.0.0.1:1)/test"}, 1, "cannot reach MySQL at 127.0.0.1:1"},
		{[]string{"stats", "--db", "mysql://root@tcp(127.0.0.1:1)/test"}, 1, "cannot reach MySQL at 127.0.0.1:1"},
		{[]string{"stats", "--db", "mysql://not a dsn"}, 1, "bad MySQL DSN"},
		{[]string{"stats", "--db", "root:hunter2@tcp(127.0.0.1:3306)"}, 1, "bad MySQL DSN"},
		{[]string{"stats", "--db", "sqlite://" + missing}, 1, "no SQLite database at " + missing},
		{[]string{"stats", "--db", missing}, 1, "no SQLite database at " + missing},
		{[]string{"stats", "--db", "file:" + missing}, 1, "no SQLite database at " + missing},
		{[]string{"stats", "--db", missing + "?mode=ro"}, 1, "parameters after '?'"},
		{[]string{"stats"}, 2, "stats needs --db"},
		{[]string{"migrate", "sideways", "--db", "sqlite://" + missing}, 2, `migrate "sideways"`},
		{[]string{"demo", "--orders", "0"}, 2, "--orders 0"},
		{[]string{"demo", "--frobnicate"}, 2, "-frobnicate"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "no command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := sqlonce(t, tc.args...)
			r.failsWith(t, tc.code, tc.want)
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("stderr shows the password: %q", r.stderr)
			}
		})
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("stats created the SQLite file it was pointed at")
	}
	r := sqlonce(t, "help").succeeds(t)
	if !strings.Contains(r.stdout, "sqlonce demo") || r.stderr != "" {
		t.Errorf("help: %q %q", r.stdout, r.stderr)
	}
}
