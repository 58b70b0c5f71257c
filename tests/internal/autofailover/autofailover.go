// Package autofailover runs a pg_auto_failover formation for the tests: a
// monitor and PostgreSQL nodes, each a `pg_autoctl create ... --run`
// started as the postgres user in a process group of its own, on a data
// dir in a temp dir and a free loopback port. The first node becomes the
// primary, the next ones its secondaries, with pg_auto_failover's default
// synchronous replication (synchronous_standby_names = ANY 1 (...),
// synchronous_commit = on). When the primary's node dies, the monitor
// promotes a secondary on its own.
//
// It needs Debian's postgresql-15-auto-failover and pg-auto-failover-cli
// and root (to start pg_autoctl as the postgres user).
package autofailover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// Where Debian puts what the formation needs.
const (
	pgAutoctl = "/usr/bin/pg_autoctl"
	pgBin     = "/usr/lib/postgresql/15/bin"
	extension = "/usr/lib/postgresql/15/lib/pgautofailover.so"
)

// readyTimeout bounds the start of one node, its base backup included.
const readyTimeout = 2 * time.Minute

// Fast are the monitor settings Start applies: failure detected after
// about two seconds of failed health checks, and the secondary promoted
// three seconds later, instead of pg_auto_failover's defaults (5 s
// checks, 20 s before a node is unhealthy, 30 s primary_demote_timeout:
// clients were back 51 s after a kill, against 6-9 s with these). primary_demote_timeout stays longer than the nodes'
// network_partition_timeout (set to 2 s), after which a primary cut off
// from the monitor and its secondaries stops taking writes: pg_auto_failover's
// guard against two primaries, kept in proportion.
var Fast = []string{
	"pgautofailover.health_check_period=1000",
	"pgautofailover.health_check_timeout=1000",
	"pgautofailover.health_check_max_retries=1",
	"pgautofailover.health_check_retry_delay=500",
	"pgautofailover.node_considered_unhealthy_timeout=2000",
	"pgautofailover.primary_demote_timeout=3000",
}

// networkPartitionTimeout is the nodes' timeout.network_partition_timeout
// (seconds), below Fast's primary_demote_timeout.
const networkPartitionTimeout = "2"

// Formation is a running monitor and its nodes.
type Formation struct {
	dir      string
	uid, gid int
	Monitor  *Proc
	Nodes    []*Proc
	// Started is how long the formation took to come up: monitor, primary
	// and secondaries in their states.
	Started time.Duration
}

// Proc is one pg_autoctl and the PostgreSQL it runs.
type Proc struct {
	Name string
	Port int
	dir  string // PGDATA

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	log    *os.File
}

// DSN is the node's connection string as the postgres superuser.
func (p *Proc) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", p.Port)
}

// Start starts a monitor (with Fast applied) and n nodes, one after the
// other, and waits until the first is the primary and the others its
// secondaries. On error everything started is stopped and the temp dir
// removed.
func Start(n int) (f *Formation, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("autofailover: not root: pg_autoctl refuses to run as root and needs root to change to the postgres user")
	}
	for _, b := range []string{pgAutoctl, extension, filepath.Join(pgBin, "pg_ctl")} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("autofailover: %w (apt-get install postgresql-15-auto-failover pg-auto-failover-cli)", err)
		}
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("autofailover: user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "sqlonce-autofailover-")
	if err != nil {
		return nil, err
	}
	f = &Formation{dir: dir, uid: uid, gid: gid}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if err := os.Chown(dir, uid, gid); err != nil {
		return f, err
	}
	ps, err := ports.Free(n + 1)
	if err != nil {
		return f, err
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n+1)*readyTimeout)
	defer cancel()

	f.Monitor = &Proc{Name: "monitor", Port: ps[0], dir: filepath.Join(dir, "monitor")}
	if err := f.initdb(f.Monitor.dir); err != nil {
		return f, err
	}
	if err := f.run(f.Monitor, "create", "monitor", "--pgdata", f.Monitor.dir, "--pgport", strconv.Itoa(f.Monitor.Port),
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run"); err != nil {
		return f, err
	}
	if err := f.waitMonitor(ctx); err != nil {
		return f, err
	}
	monitorURI := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.Monitor.Port)
	for i := range n {
		nd := &Proc{Name: fmt.Sprintf("node%d", i+1), Port: ps[i+1]}
		nd.dir = filepath.Join(dir, nd.Name)
		f.Nodes = append(f.Nodes, nd)
		if i == 0 {
			// The next nodes are base backups of the first.
			if err := f.initdb(nd.dir); err != nil {
				return f, err
			}
		}
		if err := f.run(nd, "create", "postgres", "--pgdata", nd.dir, "--pgport", strconv.Itoa(nd.Port),
			"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", nd.Name, "--auth", "trust", "--no-ssl",
			"--monitor", monitorURI, "--run"); err != nil {
			return f, err
		}
		// The next node starts once this one is registered: the first
		// registered becomes the primary, the others are base-backed up
		// from it as soon as it takes writes.
		if err := f.waitRegistered(ctx, nd); err != nil {
			return f, err
		}
	}
	for i, nd := range f.Nodes {
		want := "secondary"
		if i == 0 {
			want = "primary"
			if n == 1 {
				want = "single"
			}
		}
		if err := f.WaitState(ctx, nd.Name, want); err != nil {
			return f, err
		}
		if err := f.autoctl("config", "set", "--pgdata", nd.dir, "timeout.network_partition_timeout", networkPartitionTimeout); err != nil {
			return f, err
		}
	}
	f.Started = time.Since(began)
	return f, nil
}

// env is pg_autoctl's environment: its configuration and state under the
// temp dir (XDG_*), PostgreSQL's binaries, and the temp dir as the socket
// directory, for the servers it starts (PG_REGRESS_SOCK_DIR) and for its
// own connections to them (PGHOST).
func (f *Formation) env() []string {
	return []string{"LANG=C", "LC_ALL=C", "HOME=" + f.dir, "PATH=" + pgBin + ":/usr/bin:/bin",
		"XDG_CONFIG_HOME=" + filepath.Join(f.dir, "config"), "XDG_DATA_HOME=" + filepath.Join(f.dir, "share"),
		"XDG_RUNTIME_DIR=" + filepath.Join(f.dir, "run"), "PG_REGRESS_SOCK_DIR=" + f.dir, "PGHOST=" + f.dir}
}

// run starts a long-running pg_autoctl for p: as the postgres user, in a
// process group of its own (a ^C to the test does not reach it, and Kill
// takes the node's PostgreSQL with it), SIGKILLed by the kernel if the test
// process dies without Stop.
func (f *Formation) run(p *Proc, args ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(f.dir, p.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(pgAutoctl, args...)
	cmd.Env = f.env()
	cmd.Dir = f.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)},
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("autofailover: %s: %w", p.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p.cmd, p.exited, p.log = cmd, exited, logf
	return nil
}

// initdb makes the data dir pg_autoctl then takes as it finds it, as
// dbserver makes its servers: --no-sync, and fsync=off, which a SIGKILL
// of the processes does not make unsafe (the machine's page cache stays).
// checkpoint_completion_target=0: the base backup of a secondary starts
// with a checkpoint, spread over seconds otherwise. pg_autoctl's own
// initdb syncs: 4-5 s more each on this machine.
func (f *Formation) initdb(data string) error {
	cmd := exec.Command(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	cmd.Env = f.env()
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("autofailover: initdb %s: %w: %s", data, err, out)
	}
	conf, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer conf.Close()
	_, err = conf.WriteString("fsync = off\ncheckpoint_completion_target = 0\n")
	return err
}

// autoctl runs a short pg_autoctl command as the postgres user.
func (f *Formation) autoctl(args ...string) error {
	cmd := exec.Command(pgAutoctl, args...)
	cmd.Env = f.env()
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("autofailover: pg_autoctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitMonitor waits until the monitor answers, then applies Fast.
func (f *Formation) waitMonitor(ctx context.Context) error {
	// As the superuser, through the socket.
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=pg_auto_failover sslmode=disable", f.dir, f.Monitor.Port)
	var last error
	for ctx.Err() == nil {
		if err := f.exitedEarly(f.Monitor); err != nil {
			return err
		}
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			// The extension is created once the monitor's PostgreSQL runs.
			var ok bool
			err = c.QueryRow(ctx, "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'pgautofailover'").Scan(&ok)
			if err == nil && !ok {
				err = errors.New("no pgautofailover extension yet")
			}
			if err == nil {
				for _, set := range Fast {
					name, value, _ := strings.Cut(set, "=")
					if _, err = c.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", name, value)); err != nil {
						break
					}
				}
			}
			if err == nil {
				_, err = c.Exec(ctx, "SELECT pg_reload_conf()")
			}
			c.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("autofailover: monitor not ready on port %d: %v: %s", f.Monitor.Port, last, f.Monitor.logTail(f.dir))
}

// State is a node's state as the monitor has it.
type State struct{ Reported, Assigned string }

// States asks the monitor for every node's state, by node name.
func (f *Formation) States(ctx context.Context) (map[string]State, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=autoctl_node dbname=pg_auto_failover sslmode=disable", f.Monitor.Port))
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, "SELECT nodename, current_group_state::text, assigned_group_state::text FROM pgautofailover.current_state('default')")
	if err != nil {
		return nil, err
	}
	states := map[string]State{}
	for rows.Next() {
		var name string
		var s State
		if err := rows.Scan(&name, &s.Reported, &s.Assigned); err != nil {
			return nil, err
		}
		states[name] = s
	}
	return states, rows.Err()
}

// WaitState waits until node reports the state want and is assigned it.
func (f *Formation) WaitState(ctx context.Context, node, want string) error {
	var last State
	var lastErr error
	for ctx.Err() == nil {
		for _, p := range append([]*Proc{f.Monitor}, f.Nodes...) {
			if p.Name == node || p == f.Monitor {
				if err := f.exitedEarly(p); err != nil {
					return err
				}
			}
		}
		states, err := f.States(ctx)
		if err == nil {
			last = states[node]
			if last.Reported == want && last.Assigned == want {
				return nil
			}
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	tail := ""
	for _, p := range f.Nodes {
		if p.Name == node {
			tail = p.logTail(f.dir)
		}
	}
	return fmt.Errorf("autofailover: %s not %s (reported %q, assigned %q; %v): %s", node, want, last.Reported, last.Assigned, lastErr, tail)
}

// waitRegistered waits until the monitor knows node p.
func (f *Formation) waitRegistered(ctx context.Context, p *Proc) error {
	var last error
	for ctx.Err() == nil {
		if err := f.exitedEarly(p); err != nil {
			return err
		}
		states, err := f.States(ctx)
		if _, ok := states[p.Name]; ok && err == nil {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("autofailover: %s not registered with the monitor: %v: %s", p.Name, last, p.logTail(f.dir))
}

// exitedEarly reports a pg_autoctl that exited while it should run.
func (f *Formation) exitedEarly(p *Proc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		return fmt.Errorf("autofailover: %s exited (%v): %s", p.Name, err, p.logTail(f.dir))
	default:
		return nil
	}
}

// Kill kills node i (1-based) with SIGKILL, its pg_autoctl and PostgreSQL
// at once (the process group the node was started in): the machine's
// crash. It waits for pg_autoctl to exit.
func (f *Formation) Kill(i int) error { return f.Nodes[i-1].stop(syscall.SIGKILL) }

// Stop stops every node and the monitor by pid (SIGTERM: pg_autoctl stops
// its PostgreSQL; SIGKILL to the process group after 30 s) and removes the
// temp dir.
func (f *Formation) Stop() {
	for i := len(f.Nodes) - 1; i >= 0; i-- {
		_ = f.Nodes[i].stop(syscall.SIGTERM)
	}
	if f.Monitor != nil {
		_ = f.Monitor.stop(syscall.SIGTERM)
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}

// stop signals p: SIGKILL goes to its whole process group, SIGTERM to
// pg_autoctl, which stops its PostgreSQL. Either way the process group is
// SIGKILLed once pg_autoctl has exited, or after 30 s, so that no server
// outlives it.
func (p *Proc) stop(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	pgid := p.cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		p.log.Close()
		p.cmd = nil
	}()
	var err error
	if sig == syscall.SIGKILL {
		err = syscall.Kill(-pgid, sig)
	} else {
		err = p.cmd.Process.Signal(sig)
	}
	if err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("autofailover: %s: %v: %w", p.Name, sig, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("autofailover: %s ignored %v for 30s; killed", p.Name, sig)
	}
}

func (p *Proc) logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, p.Name+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}
