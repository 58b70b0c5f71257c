// Package snippets runs every Go snippet of README.md and docs/*.md, so
// that a snippet cannot rot: it must compile and run as written, on every
// database it names.
//
// # Markers
//
// Every ```go fence carries a marker: words after "go" on the fence's
// line (GitHub and pkg.go.dev take only the first word for highlighting),
// or else an HTML comment on the line right before it:
//
//	```go pgx pgsql mysql sqlite tx http
//	<!-- snippet: pgx tx -->
//	<!-- snippet: skip needs a sharded Vitess keyspace -->
//
// A marker that is not a skip names the targets the snippet runs on (at least one):
//
//	pgx     PostgreSQL through pgx/v5:      pool *pgxpool.Pool, db *sql.DB (stdlib.OpenDBFromPool(pool))
//	pgsql   PostgreSQL through database/sql (pgx's stdlib): db *sql.DB
//	mysql   MariaDB/MySQL (go-sql-driver/mysql):            db *sql.DB
//	sqlite  SQLite (modernc.org/sqlite, sqlitedriver/modernc.Open): db *sql.DB
//
// and three options: "drv" gives the snippet drv, the target's driver
// (pgxdriver, pgsqldriver, mysqldriver, sqlitedriver) built on its handle,
// for snippets that continue one that built it; "tx" gives the snippet an open transaction tx (pgx.Tx
// on pgx, *sql.Tx elsewhere), committed after the snippet when it returns
// nil; "http" sends a request like r (below) through mux twice after the
// snippet and wants a 2xx answer both times. "skip" followed by a reason marks a
// snippet that cannot run here; the reason is required.
//
// # The wrapper
//
// A snippet is a fragment: it becomes the body of a function returning
// error (so it may `return err`; `return nil` is appended), compiled with
// //line directives so that an error names the Markdown file and line.
// Its import lines are dropped: the generated file imports the packages
// listed in imports below (a snippet importing another one fails; add it
// there). Besides ctx (context.Context), the handles above and tx, every
// snippet has
//
//	logger *slog.Logger            // writes to stderr
//	mux    *http.ServeMux          // for handlers the snippet registers
//	w      http.ResponseWriter     // a recorder
//	r      *http.Request           // POST /payments, Idempotency-Key: "k-1", body {"amount":100}, user "u-1"
//	userID func(*http.Request) string // "u-1"
//	charge func(ctx context.Context, idempotencyKey string) ([]byte, error) // a payment provider that drops repeats
//
// Each run gets an empty schema (PostgreSQL), database (MariaDB) or file
// (SQLite), migrated with migrations.Up, holding these tables:
//
//	ledger (ref VARCHAR(64) PRIMARY KEY, amount BIGINT)
//	orders (id BIGINT PRIMARY KEY, code VARCHAR(64) UNIQUE (named orders_code_key),
//	        status VARCHAR(16), amount BIGINT, version BIGINT)  -- row 1: 'A-1', 'created', 1000, 1
//	stock  (item VARCHAR(64) PRIMARY KEY, qty BIGINT)          -- row 'sku-1', 10
//
// Without a server, its targets are skipped naming the variable to set
// (SQLONCE_POSTGRES_DSN, SQLONCE_MYSQL_DSN); under CI=true they fail.
package snippets

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	// The generated program imports it (docs/operations.md's snippet);
	// imported here so that the tests module requires it.
	_ "github.com/sqlonce/sqlonce/sqlonceotel"
)

// imports are the packages a snippet may use, with one exported name of
// each (so that the generated file uses every import).
var imports = map[string]string{
	"context":                                         "context.Background",
	"database/sql":                                    "sql.ErrNoRows",
	"encoding/json":                                   "json.Marshal",
	"errors":                                          "errors.Is",
	"fmt":                                             "fmt.Errorf",
	"log/slog":                                        "slog.New",
	"net/http":                                        "http.StatusOK",
	"time":                                            "time.Second",
	"github.com/jackc/pgx/v5":                         "pgx.BeginFunc",
	"github.com/jackc/pgx/v5/pgxpool":                 "pgxpool.New",
	"github.com/jackc/pgx/v5/stdlib":                  "stdlib.OpenDBFromPool",
	"github.com/sqlonce/sqlonce":                      "sqlonce.IsRetryable",
	"github.com/sqlonce/sqlonce/dedupe":               "dedupe.New[pgx.Tx]",
	"github.com/sqlonce/sqlonce/httpidem":             "httpidem.RecordSuccess",
	"github.com/sqlonce/sqlonce/inbox":                "inbox.New[pgx.Tx]",
	"github.com/sqlonce/sqlonce/migrations":           "migrations.Up",
	"github.com/sqlonce/sqlonce/mysqldriver":          "mysqldriver.New",
	"github.com/sqlonce/sqlonce/optimistic":           "optimistic.Update[int64]",
	"github.com/sqlonce/sqlonce/outbox":               "outbox.New[pgx.Tx]",
	"github.com/sqlonce/sqlonce/sqlonceotel":          "sqlonceotel.New",
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn":   "mattn.Open",
	"github.com/sqlonce/sqlonce/pgsqldriver":          "pgsqldriver.New",
	"github.com/sqlonce/sqlonce/pgxdriver":            "pgxdriver.New",
	"github.com/sqlonce/sqlonce/sqlitedriver":         "sqlitedriver.New",
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc": "modernc.Open",
	"github.com/sqlonce/sqlonce/statemachine":         "statemachine.Edge[string]",
	"github.com/sqlonce/sqlonce/token":                "token.New[pgx.Tx]",
	"github.com/sqlonce/sqlonce/unique":               "unique.Inserted",
}

// blankImports are imported for their side effects (a database/sql
// driver); a snippet may import them with `import _ "path"`.
var blankImports = []string{"github.com/mattn/go-sqlite3"}

var targets = map[string]bool{"pgx": true, "pgsql": true, "mysql": true, "sqlite": true}

type snippet struct {
	file    string // relative to the repository root
	line    int    // of the fence's first code line
	code    []string
	targets []string
	tx      bool
	drv     bool
	http    bool
	skip    string
	err     string // a marker error
}

func (s snippet) name() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

func (s snippet) fn(target string) string {
	r := strings.NewReplacer("/", "_", ".", "_", "-", "_")
	return fmt.Sprintf("s_%s_%d_%s", r.Replace(s.file), s.line, target)
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// collect returns the Go snippets of README.md and docs/*.md.
func collect(t *testing.T) []snippet {
	t.Helper()
	dir := root(t)
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	sort.Strings(files[1:])
	var out []snippet
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parse(f, b)...)
	}
	return out
}

func parse(file string, b []byte) []snippet {
	var out []snippet
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimLeft(l, " \t")
		info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
		if !strings.HasPrefix(trimmed, "```") || len(info) == 0 || info[0] != "go" {
			continue
		}
		indent := l[:len(l)-len(trimmed)]
		s := snippet{file: file, line: i + 2}
		switch {
		case len(info) > 1:
			s.mark(strings.Join(info[1:], " "))
		case i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "<!-- snippet:") && strings.HasSuffix(strings.TrimSpace(lines[i-1]), "-->"):
			l := strings.TrimSpace(lines[i-1])
			s.mark(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(l, "<!-- snippet:"), "-->")))
		default:
			s.err = "no marker: write ```go TARGETS... or <!-- snippet: TARGETS... --> on the line before the fence"
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			s.code = append(s.code, strings.TrimPrefix(lines[i], indent))
		}
		out = append(out, s)
	}
	return out
}

func (s *snippet) mark(l string) {
	f := strings.Fields(l)
	if len(f) > 0 && f[0] == "skip" {
		s.skip = strings.Join(f[1:], " ")
		if s.skip == "" {
			s.err = "a skip marker needs a reason"
		}
		return
	}
	for _, w := range f {
		switch {
		case targets[w]:
			s.targets = append(s.targets, w)
		case w == "tx":
			s.tx = true
		case w == "drv":
			s.drv = true
		case w == "http":
			s.http = true
		default:
			s.err = fmt.Sprintf("unknown word %q in the marker", w)
			return
		}
	}
	if len(s.targets) == 0 {
		s.err = "the marker names no target (pgx, pgsql, mysql, sqlite) and is not a skip"
	}
}

// TestMarkers needs no database: every fence is marked, and marked well.
func TestMarkers(t *testing.T) {
	n := 0
	for _, s := range collect(t) {
		n++
		if s.err != "" {
			t.Errorf("%s: %s", s.name(), s.err)
		}
	}
	if n == 0 {
		t.Fatal("no Go snippet found: is the repository root ../..?")
	}
}

// generate writes the program that holds every runnable snippet.
func generate(t *testing.T, snips []snippet) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("// Code generated by tests/snippets. DO NOT EDIT.\n\npackage main\n\nimport (\n")
	paths := make([]string, 0, len(imports))
	for p := range imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	for _, p := range blankImports {
		fmt.Fprintf(&b, "\t_ %q\n", p)
	}
	b.WriteString(")\n\nvar (\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "\t_ = %s\n", imports[p])
	}
	b.WriteString(")\n\nvar snippets = map[string]func(context.Context, *env) error{\n")
	for _, s := range snips {
		for _, tg := range s.targets {
			fmt.Fprintf(&b, "\t%q: %s,\n", s.name()+"/"+tg, s.fn(tg))
		}
	}
	b.WriteString("}\n")
	for _, s := range snips {
		for _, tg := range s.targets {
			fmt.Fprintf(&b, "\nfunc %s(ctx context.Context, e *env) error {\n", s.fn(tg))
			vars := "db, logger, mux, w, r, userID, charge := e.db, e.logger, e.mux, e.w, e.r, e.userID, e.charge\n\t_, _, _, _, _, _, _ = db, logger, mux, w, r, userID, charge\n"
			fmt.Fprintf(&b, "\t%s", vars)
			if tg == "pgx" {
				b.WriteString("\tpool := e.pool\n\t_ = pool\n")
			}
			if s.drv {
				fmt.Fprintf(&b, "\tdrv := e.%sDrv\n\t_ = drv\n", tg)
			}
			if s.tx {
				if tg == "pgx" {
					b.WriteString("\ttx := e.pgxTx\n\t_ = tx\n")
				} else {
					b.WriteString("\ttx := e.sqlTx\n\t_ = tx\n")
				}
			}
			fmt.Fprintf(&b, "//line %s:%d\n", s.file, s.line)
			for _, l := range s.code {
				if strings.HasPrefix(strings.TrimSpace(l), "import ") {
					b.WriteString("\n") // checked by checkImports; keeps the line numbers
					continue
				}
				b.WriteString(l + "\n")
			}
			b.WriteString("\treturn nil\n}\n")
		}
	}
	return b.Bytes()
}

// checkImports fails for an import line naming a package not in imports.
// Only one-line imports are allowed in snippets.
func checkImports(t *testing.T, s snippet) {
	for _, l := range s.code {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "import ") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(l, "import "))
		if len(f) == 0 {
			continue
		}
		p, err := strconv.Unquote(f[len(f)-1])
		if err != nil {
			p, err = strconv.Unquote(f[0])
		}
		if err != nil {
			t.Errorf("%s: only one-line imports (import \"path\") are allowed: %s", s.name(), l)
			continue
		}
		if _, ok := imports[p]; !ok && !slices.Contains(blankImports, p) {
			t.Errorf("%s: imports %s, which tests/snippets does not know: add it to imports", s.name(), p)
		}
	}
}

// TestSnippets compiles every runnable snippet into one program, then runs
// each on each of its targets, on an empty database of its own.
func TestSnippets(t *testing.T) {
	var runnable []snippet
	for _, s := range collect(t) {
		if s.err != "" || s.skip != "" {
			continue // TestMarkers reports the former
		}
		checkImports(t, s)
		runnable = append(runnable, s)
	}
	if t.Failed() {
		return
	}
	gen, err := os.MkdirTemp(".", "_gen")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(gen) })
	src, err := os.ReadFile("runner.go")
	if err != nil {
		t.Fatal(err)
	}
	src = bytes.Replace(src, []byte("//go:build ignore\n"), nil, 1)
	if err := os.WriteFile(filepath.Join(gen, "runner.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gen, "snippets.go"), generate(t, runnable), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "snippets")
	// tests/run's flags, so that the packages the tests module compiled are
	// reused from the build cache (see tests/run).
	args := []string{"build", "-trimpath", "-o", bin}
	if raceEnabled {
		args = append(args, "-race", "-gcflags=modernc.org/...=-race=false")
	}
	build := exec.Command("go", append(args, "./"+filepath.Base(gen))...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("a snippet does not compile (the lines are the Markdown's):\n%s", out)
	}
	for _, s := range runnable {
		for _, tg := range s.targets {
			t.Run(s.name()+"/"+tg, func(t *testing.T) {
				var dsn string
				switch tg {
				case "pgx", "pgsql":
					_, dsn = testdb.EmptyPostgres(t)
				case "mysql":
					_, dsn = testdb.EmptyMySQL(t)
				case "sqlite":
					dsn = testdb.EmptySQLite(t)
				}
				args := []string{"-target", tg, "-dsn", dsn, "-snippet", s.name() + "/" + tg}
				if s.tx {
					args = append(args, "-tx")
				}
				if s.http {
					args = append(args, "-http")
				}
				cmd := exec.Command(bin, args...)
				cmd.Dir = t.TempDir() // where a snippet's own files go ("app.db")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s on %s: %v\n%s", s.name(), tg, err, out)
				}
			})
		}
	}
}
