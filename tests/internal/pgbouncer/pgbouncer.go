// Package pgbouncer runs a real PgBouncer in transaction pooling mode, as a
// child process on a free loopback port, in front of the test PostgreSQL
// server, and gives each test schema a database name of its own on it.
//
// PgBouncer 1.18 does not pass a client's search_path (a startup parameter,
// or -c search_path in options) to the server: in transaction pooling a
// server connection serves many clients, and only the few parameters it
// tracks (client_encoding, DateStyle, TimeZone, standard_conforming_strings,
// application_name) follow the client. So a schema is reached the way a
// deployment would: a database entry whose connect_query sets search_path
// on every server connection of that entry's pool. Schema adds one and has
// PgBouncer reload its configuration.
//
// # Server connections
//
// The bouncer is frugal with the server's connections, so that the suite
// fits PostgreSQL's default max_connections of 100 beside the tests that
// connect directly: all its pools together hold at most MaxServerConns
// (max_user_connections: a pool short of one closes the oldest idle
// connection of another pool, so a finished test's idle connections make
// room for the next), an idle server connection closes after a second (a
// minute on a server of max_connections 1000, as .ci/run sets), and
// a schema's database has its server connections closed when its test
// ends (RECONNECT, which leaves clients alone).
package pgbouncer

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// BinEnv names the pgbouncer binary, when it is not on PATH or in
// /usr/sbin.
const BinEnv = "SQLONCE_PGBOUNCER"

// MaxServerConns bounds the server connections of all the bouncer's pools
// together. It is above the most a case holds at once (Racers+4 open
// transactions while warming a pool, and a second pool of one connection
// with other settings): a case waits for no other case's connections.
const MaxServerConns = 50

// Bouncer is a running PgBouncer.
type Bouncer struct {
	Port int

	dir    string
	ini    string
	server *url.URL // the PostgreSQL server behind it
	// idleTimeout is server_idle_timeout, in seconds.
	idleTimeout int
	cmd         *exec.Cmd
	exited      chan struct{}
	mu          sync.Mutex
	entries     []string // [databases] lines
	n           int      // databases added with settings
}

var (
	mu       sync.Mutex
	bouncers = map[string]*started{}
)

type started struct {
	once sync.Once
	b    *Bouncer
	err  error
}

// Shared returns the package's PgBouncer, started on first use and
// stopped by Stop (call it from TestMain). Outside CI a missing pgbouncer
// binary skips t; under CI=true it fails t.
func Shared(t testing.TB) *Bouncer {
	t.Helper()
	return Named(t, "")
}

// Named is Shared for a bouncer of name's own: tests running in parallel
// (the conformance configurations) each take one, so that none waits for
// another's server connections (MaxServerConns is per bouncer).
func Named(t testing.TB, name string) *Bouncer {
	t.Helper()
	server := testdb.PostgresDSN(t)
	mu.Lock()
	s := bouncers[name]
	if s == nil {
		s = &started{}
		bouncers[name] = s
	}
	mu.Unlock()
	s.once.Do(func() { s.b, s.err = start(server, idleTimeout(testdb.PostgresMaxConnections(t))) })
	if s.err != nil {
		if testdb.InCI() {
			t.Fatalf("CI=true and pgbouncer did not start: %v", s.err)
		}
		t.Skipf("pgbouncer did not start (apt-get install pgbouncer): %v", s.err)
	}
	return s.b
}

// Stop stops every bouncer Shared and Named started.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range bouncers {
		if s.b != nil {
			s.b.stop()
		}
	}
}

// idleTimeout is server_idle_timeout for a server of max_connections n:
// a second where the server has little room (the default 100), a minute
// where it has 1000 (.ci/run), so that the next case on a kept schema
// (the harness keeps them) finds the server connections it needs open:
// each race case opened ~32 of them anew, a fork and ~5 to 40 ms of the
// server's CPU each. The bouncers' pools hold MaxServerConns together
// at most each.
func idleTimeout(n int) int {
	if n >= 1000 {
		return 60
	}
	return 1
}

func start(serverDSN string, idleTimeout int) (*Bouncer, error) {
	bin := os.Getenv(BinEnv)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			if _, statErr := os.Stat("/usr/sbin/pgbouncer"); statErr != nil {
				return nil, err
			}
			bin = "/usr/sbin/pgbouncer"
		}
	}
	server, err := url.Parse(serverDSN)
	if err != nil {
		return nil, err
	}
	port, err := ports.One()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sqlonce-pgbouncer-")
	if err != nil {
		return nil, err
	}
	// PgBouncer runs as the postgres user when the tests run as root:
	// it must read the files and write its log here.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	b := &Bouncer{Port: port, dir: dir, ini: filepath.Join(dir, "pgbouncer.ini"), server: server, idleTimeout: idleTimeout, exited: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := b.writeIni(); err != nil {
		return nil, err
	}
	args := []string{b.ini}
	name := bin
	if os.Geteuid() == 0 {
		name, args = "runuser", append([]string{"-u", "postgres", "--", bin}, args...)
	}
	b.cmd = exec.Command(name, args...) // its log goes to logfile
	dieWithParent(b.cmd)
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return nil, fmt.Errorf("pgbouncer exited at start: %v: %s", b.cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, fmt.Errorf("pgbouncer not listening on %d: %w", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeIni writes the configuration: transaction pooling, trust
// authentication, no unix socket, and the [databases] entries.
func (b *Bouncer) writeIni() error {
	host, port := b.server.Hostname(), b.server.Port()
	if port == "" {
		port = "5432"
	}
	dbname := strings.TrimPrefix(b.server.Path, "/")
	var sb strings.Builder
	sb.WriteString("[databases]\n")
	fmt.Fprintf(&sb, "%s = host=%s port=%s dbname=%s\n", dbname, host, port, dbname)
	for _, e := range b.entries {
		sb.WriteString(e + "\n")
	}
	fmt.Fprintf(&sb, `
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = postgres
pool_mode = transaction
ignore_startup_parameters = extra_float_digits
max_client_conn = 2000
default_pool_size = 20
max_user_connections = %d
server_idle_timeout = %d
logfile = %s
pidfile = %s
`, b.Port, filepath.Join(b.dir, "users.txt"), MaxServerConns, b.idleTimeout, filepath.Join(b.dir, "pgbouncer.log"), filepath.Join(b.dir, "pgbouncer.pid"))
	return os.WriteFile(b.ini, []byte(sb.String()), 0o644)
}

// DSN is the DSN of the server's own database through the bouncer.
func (b *Bouncer) DSN() string { return b.dsn(strings.TrimPrefix(b.server.Path, "/")) }

func (b *Bouncer) dsn(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.Port, dbname)
}

// Schema adds a database whose server connections have search_path set to
// schema, and each of settings (run-time parameters, as a client would put
// in its startup packet, which PgBouncer refuses), reloads the bouncer, and
// returns its DSN. The database is removed when t ends.
func (b *Bouncer) Schema(t testing.TB, schema string, settings map[string]string) string {
	t.Helper()
	dsn, reconnect, err := b.KeptSchema(schema, settings)
	if err != nil {
		t.Fatalf("pgbouncer RELOAD: %v", err)
	}
	// The database stays in the configuration until the bouncer stops:
	// PgBouncer 1.18 aborted (FATAL "bad client state" in
	// disconnect_client) on KILL or removal of a database whose clients
	// were still logging in. When t ends (after the case's pools closed:
	// cleanups run last registered first) RECONNECT closes its server
	// connections, each as soon as it is idle, and touches no client.
	t.Cleanup(func() {
		if err := reconnect(); err != nil {
			t.Errorf("pgbouncer %v", err)
		}
	})
	return dsn
}

// KeptSchema is Schema for a schema that outlives a test (the harness
// keeps migrated schemas for the next case): reconnect closes the bouncer
// database's server connections, as Schema does when its test ends.
func (b *Bouncer) KeptSchema(schema string, settings map[string]string) (dsn string, reconnect func() error, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	host, port := b.server.Hostname(), b.server.Port()
	if port == "" {
		port = "5432"
	}
	name := schema
	query := "SET search_path TO " + schema
	if len(settings) > 0 {
		b.n++
		name = fmt.Sprintf("%s_%d", schema, b.n)
		keys := make([]string, 0, len(settings))
		for k := range settings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			query += fmt.Sprintf(`; SET %s TO "%s"`, k, settings[k])
		}
	}
	// pool_size as large as the bouncer's bound: a case's connections
	// never wait for each other.
	entry := fmt.Sprintf("%s = host=%s port=%s dbname=%s pool_size=%d connect_query='%s'",
		name, host, port, strings.TrimPrefix(b.server.Path, "/"), MaxServerConns, query)
	b.entries = append(b.entries, entry)
	if err := b.reload(); err != nil {
		return "", nil, err
	}
	return b.dsn(name), func() error {
		if err := b.admin("RECONNECT " + name); err != nil {
			return fmt.Errorf("RECONNECT %s: %w", name, err)
		}
		return nil
	}, nil
}

func (b *Bouncer) reload() error {
	if err := b.writeIni(); err != nil {
		return err
	}
	return b.admin("RELOAD")
}

// admin runs a command on the admin console, which speaks only the simple
// query protocol.
func (b *Bouncer) admin(cmd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, b.dsn("pgbouncer")+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, cmd)
	return err
}

// stop ends the process by pid (SIGTERM, then SIGKILL) and removes its
// directory.
func (b *Bouncer) stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	}
	_ = os.RemoveAll(b.dir)
}
