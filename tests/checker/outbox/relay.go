package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
)

// RelayTarget is how a relay process reaches the database.
type RelayTarget struct {
	// Dialect is "postgres" (pgxdriver), "mysql" or "sqlite".
	Dialect string
	// DSNs: relay i connects to DSNs[i%len] (the nodes of a cluster).
	DSNs []string
	// SQLDriver is the database/sql driver name, for SQLite.
	SQLDriver string
}

// The environment of a relay process (TestRelayChild).
const (
	childEnv     = "SQLONCE_OUTBOX_RELAY"
	dialectEnv   = "SQLONCE_OUTBOX_RELAY_DIALECT"
	dsnEnv       = "SQLONCE_OUTBOX_RELAY_DSN"
	sqlDriverEnv = "SQLONCE_OUTBOX_RELAY_SQL_DRIVER"
)

// IsRelayChild reports whether this process is a relay process of a run.
func IsRelayChild() bool { return os.Getenv(childEnv) != "" }

// The relay's settings in a relay process: short leases, so that the
// messages a killed relay held are taken over within the run; a quick
// poll; retries that outlast a broker restart without parking anything.
var relayOptions = []outbox.RelayOption{
	outbox.WithLease(2 * time.Second),
	outbox.WithPollInterval(50 * time.Millisecond),
	outbox.WithBatchSize(20),
	outbox.WithConcurrency(8),
	outbox.WithRetry(100000, 20*time.Millisecond, 500*time.Millisecond),
}

// RelayMain is the body of a relay process: it opens the database the
// environment names, builds the broker's publisher, and runs
// outbox.Store.Relay until SIGTERM (the run's end) or SIGKILL (a fault).
func RelayMain() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pub, closePub, err := childPublisher()
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	defer closePub()
	dsn := os.Getenv(dsnEnv)
	switch d := os.Getenv(dialectEnv); d {
	case "postgres":
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		drv, err := pgxdriver.New(pool)
		if err != nil {
			return err
		}
		return relay(ctx, drv, pub)
	case "mysql", "sqlite":
		name := "mysql"
		if d == "sqlite" {
			name = os.Getenv(sqlDriverEnv)
		}
		db, err := sql.Open(name, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxOpenConns(8)
		var drv sqlonce.Driver[*sql.Tx]
		if d == "mysql" {
			drv, err = mysqldriver.New(db)
		} else {
			drv, err = sqlitedriver.New(db)
		}
		if err != nil {
			return err
		}
		return relay(ctx, drv, pub)
	default:
		return fmt.Errorf("%s=%q: not a dialect", dialectEnv, d)
	}
}

func relay[TTx any](ctx context.Context, d sqlonce.Driver[TTx], pub outbox.Publisher) error {
	s, err := outbox.New(d)
	if err != nil {
		return err
	}
	err = s.Relay(ctx, pub, relayOptions...)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil // stopped by SIGTERM
	}
	return err
}

// relays are the run's relay processes: children of the test binary
// (TestRelayChild), killed with SIGKILL and started again as the faults
// say, stopped with SIGTERM at the end.
type relays struct {
	t     testing.TB
	procs []*relayProc

	mu       sync.Mutex
	kills    int
	problems []string
	stopped  bool
}

type relayProc struct {
	rs     *relays
	i      int
	env    []string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
	// expected is set before the process is killed or stopped: an exit
	// without it is a relay that died by itself.
	expected bool
}

// newRelays starts n relay processes, relay i on target.DSNs[i%len].
func newRelays(t testing.TB, target RelayTarget, b broker, n int) *relays {
	t.Helper()
	rs := &relays{t: t}
	dir := t.TempDir()
	for i := range n {
		env := append(os.Environ(),
			childEnv+"=1",
			dialectEnv+"="+target.Dialect,
			dsnEnv+"="+target.DSNs[i%len(target.DSNs)],
			sqlDriverEnv+"="+target.SQLDriver)
		env = append(env, b.RelayEnv()...)
		p := &relayProc{rs: rs, i: i, env: env, log: filepath.Join(dir, fmt.Sprintf("relay-%d.log", i))}
		if err := p.start(); err != nil {
			rs.stopAll()
			t.Fatalf("relay %d: %v", i, err)
		}
		rs.procs = append(rs.procs, p)
	}
	return rs
}

func (p *relayProc) start() error {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChild$", "-test.count=1", "-test.v")
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	// The kernel kills a relay whose test process died without stopping
	// it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	exited := make(chan struct{})
	p.rs.mu.Lock()
	p.cmd, p.exited, p.expected = cmd, exited, false
	p.rs.mu.Unlock()
	go func() {
		err := cmd.Wait()
		out.Close()
		p.rs.mu.Lock()
		if !p.expected {
			p.rs.problems = append(p.rs.problems, fmt.Sprintf("relay %d (pid %d) exited by itself (%v):\n%s", p.i, cmd.Process.Pid, err, tail(p.log, 30)))
		} else if p.rs.stopped && err != nil {
			p.rs.problems = append(p.rs.problems, fmt.Sprintf("relay %d (pid %d) stopped with SIGTERM exited with %v:\n%s", p.i, cmd.Process.Pid, err, tail(p.log, 30)))
		}
		p.rs.mu.Unlock()
		close(exited)
	}()
	return nil
}

// killOne kills relay i%n with SIGKILL, waits for it to die and starts it
// again.
func (rs *relays) killOne(i int) error {
	p := rs.procs[i%len(rs.procs)]
	rs.mu.Lock()
	if rs.stopped {
		rs.mu.Unlock()
		return nil
	}
	p.expected = true
	rs.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.exited
	rs.mu.Lock()
	rs.kills++
	rs.mu.Unlock()
	return p.start()
}

// stopAll stops every relay with SIGTERM, and waits for each (SIGKILL
// after 15 s). It may be called more than once.
func (rs *relays) stopAll() {
	rs.mu.Lock()
	if rs.stopped {
		rs.mu.Unlock()
		return
	}
	rs.stopped = true
	for _, p := range rs.procs {
		p.expected = true
	}
	rs.mu.Unlock()
	for _, p := range rs.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range rs.procs {
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			rs.mu.Lock()
			rs.problems = append(rs.problems, fmt.Sprintf("relay %d did not stop 15 s after SIGTERM:\n%s", p.i, tail(p.log, 30)))
			rs.mu.Unlock()
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// publishErrors counts the failed publishes the relay processes logged.
func (rs *relays) publishErrors() int {
	n := 0
	for _, p := range rs.procs {
		b, _ := os.ReadFile(p.log)
		n += strings.Count(string(b), publishErrorMark)
	}
	return n
}

// failures lists the relays that died by themselves or failed to stop.
func (rs *relays) failures() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slicesClone(rs.problems)
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
