package sqlonce_test

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestCommandHelp: 'sqlonce CMD -h', in each spelling, shows that
// command's usage, its own flags and an example on stdout, and exits 0.
func TestCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		cmd   []string
		flags []string
	}{
		{[]string{"demo"}, []string{"--db DSN", "--orders N", "--keep"}},
		{[]string{"migrate"}, []string{"--db DSN"}},
		{[]string{"purge"}, []string{"--db DSN", "--batch N"}},
		{[]string{"stats"}, []string{"--db DSN"}},
		{[]string{"keys", "get"}, []string{"--db DSN", "--scope S", "--json"}},
		{[]string{"keys", "forget"}, []string{"--db DSN", "--scope S", "--leased", "--json"}},
		{[]string{"keys", "list"}, []string{"--db DSN", "--scope S", "--state STATE", "--limit N", "--json"}},
		{[]string{"outbox", "stats"}, []string{"--db DSN", "--schema NAME", "--json"}},
		{[]string{"outbox", "list"}, []string{"--db DSN", "--state STATE", "--after SEQ", "--limit N", "--json"}},
		{[]string{"outbox", "get"}, []string{"--db DSN", "--json"}},
		{[]string{"outbox", "redrive"}, []string{"--db DSN", "--json"}},
		{[]string{"outbox", "forget"}, []string{"--db DSN", "--leased", "--json"}},
		{[]string{"version"}, nil},
	} {
		name := strings.Join(tc.cmd, " ")
		t.Run(name, func(t *testing.T) {
			var first string
			for _, args := range [][]string{
				append(append([]string{}, tc.cmd...), "-h"),
				append(append([]string{}, tc.cmd...), "--help"),
				append([]string{"help"}, tc.cmd...),
			} {
				r := sqlonce(t, args...).succeeds(t)
				if r.stderr != "" {
					t.Errorf("sqlonce %q wrote on stderr: %q", args, r.stderr)
				}
				if first == "" {
					first = r.stdout
				} else if r.stdout != first {
					t.Errorf("sqlonce %q differs from %s -h:\n%s", args, name, r.stdout)
				}
			}
			if name == "demo" && !strings.Contains(strings.Join(strings.Fields(first), " "), "1 operational failure: database unreachable, migrations missing, SQL error, a demo check failed") {
				t.Errorf("demo -h does not say a failed demo check exits 1:\n%s", first)
			}
			if !strings.HasPrefix(first, "Usage: sqlonce "+name) {
				t.Errorf("%s -h does not start with its usage:\n%s", name, first)
			}
			for _, f := range tc.flags {
				if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(f) + `\s`).MatchString(first) {
					t.Errorf("%s -h does not list %s:\n%s", name, f, first)
				}
			}
			if !regexp.MustCompile(`(?m)^Example:\n  sqlonce ` + regexp.QuoteMeta(name)).MatchString(first) {
				t.Errorf("%s -h shows no example:\n%s", name, first)
			}
			if strings.Contains(first, "sqlonce keys list") && name != "keys list" {
				t.Errorf("%s -h shows the global usage:\n%s", name, first)
			}
			if len(tc.flags) > 0 && !strings.Contains(first, "user:pass@tcp(host:3306)/db") {
				t.Errorf("%s -h does not list the DSN forms:\n%s", name, first)
			}
			if !strings.Contains(first, "Exit status:") {
				t.Errorf("%s -h does not list its exit statuses:\n%s", name, first)
			}
		})
	}

	// keys alone lists its subcommands.
	r := sqlonce(t, "keys", "-h").succeeds(t)
	for _, sub := range []string{"keys get", "keys forget", "keys list"} {
		if !strings.Contains(r.stdout, "sqlonce "+sub+" --db DSN") {
			t.Errorf("keys -h does not list %s:\n%s", sub, r.stdout)
		}
	}
	if r2 := sqlonce(t, "help", "keys").succeeds(t); r2.stdout != r.stdout {
		t.Errorf("help keys differs from keys -h:\n%s", r2.stdout)
	}
	// outbox alone lists its subcommands.
	r = sqlonce(t, "outbox", "-h").succeeds(t)
	for _, sub := range []string{"stats", "list", "get", "redrive", "forget"} {
		if !strings.Contains(r.stdout, "sqlonce outbox "+sub+" --db DSN") {
			t.Errorf("outbox -h does not list %s:\n%s", sub, r.stdout)
		}
	}
	if r2 := sqlonce(t, "help", "outbox").succeeds(t); r2.stdout != r.stdout {
		t.Errorf("help outbox differs from outbox -h:\n%s", r2.stdout)
	}
	// The global usage documents the exit statuses and the DSN forms.
	r = sqlonce(t, "--help").succeeds(t)
	for _, want := range []string{"sqlonce version", "sqlonce outbox list", "3  not found", "2  usage error", "user:pass@tcp(host:3306)/db", "host=localhost"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("sqlonce --help does not say %q:\n%s", want, r.stdout)
		}
	}
	sqlonce(t, "help", "frobnicate").failsWith(t, 2, `unknown command "frobnicate"`)
}

// TestVersion: the module's version (here a checkout: "(devel)") and the
// Go that built it.
func TestVersion(t *testing.T) {
	r := sqlonce(t, "version").succeeds(t)
	if !regexp.MustCompile(`^sqlonce (v\d+\.\d+\.\d+\S*|\(devel\)\S*)`).MatchString(r.stdout) {
		t.Errorf("version does not start with sqlonce's version:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, runtime.Version()) || !strings.Contains(r.stdout, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("version does not name the Go that built it:\n%s", r.stdout)
	}
	if r2 := sqlonce(t, "--version").succeeds(t); r2.stdout != r.stdout {
		t.Errorf("--version differs from version: %q", r2.stdout)
	}
	sqlonce(t, "version", "extra").failsWith(t, 2, "version takes no arguments")
}

// TestExitStatus: a script tells a key that is not there (3) from a
// database it cannot reach (1), a refused forget (4) and its own mistake
// (2).
func TestExitStatus(t *testing.T) {
	tg := sqliteTarget(t)
	sqlonce(t, "migrate", "up", "--db", tg.dsn).succeeds(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"keys", "get", "--db", tg.dsn, "--scope", "s", "k"}, 3, "not found"},
		{[]string{"keys", "forget", "--db", tg.dsn, "--scope", "s", "k"}, 3, "not found"},
		{[]string{"keys", "get", "--db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable", "--scope", "s", "k"}, 1, "cannot reach PostgreSQL"},
		{[]string{"keys", "get", "--db", "root@tcp(127.0.0.1:1)/test", "--scope", "s", "k"}, 1, "cannot reach MySQL"},
		{[]string{"keys", "get", "--db", tg.dsn + ".missing.db", "--scope", "s", "k"}, 1, "no SQLite database"},
		{[]string{"keys", "get", "--scope", "s", "k"}, 2, "needs --db"},
		{[]string{"keys", "get", "--db", tg.dsn, "--scope", "s", "k", "--frobnicate"}, 2, "-frobnicate"},
	} {
		sqlonce(t, tc.args...).failsWith(t, tc.code, tc.want)
	}
	// 4: forget refuses a key a lease holds; keys_test asserts it on
	// every database.

	// A usage error points at the command's own help.
	sqlonce(t, "keys", "get", "--scope", "s", "k").failsWith(t, 2, "(see 'sqlonce keys get -h')")
	sqlonce(t, "demo", "--orders", "0").failsWith(t, 2, "(see 'sqlonce demo -h')")
}
