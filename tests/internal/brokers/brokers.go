// Package brokers starts throwaway message brokers from Debian's packages
// as child processes for a test: NATS with JetStream (nats-server) and
// RabbitMQ (rabbitmq-server), each on loopback ports of package ports and
// a data dir in the test's temp dir, stopped by pid when the test ends.
// A Server can be killed (SIGKILL) and started again on the same port and
// data, to test what a client does across a broker's crash.
//
// When a broker's binary is missing, the test is skipped naming the
// package to install, except under CI=true, where it fails.
package brokers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// Where Debian puts the brokers. rabbitmq-server is the script that runs
// the node in the foreground (the one in /usr/sbin switches to the
// rabbitmq user and logs to /var/log).
const (
	NATSServer     = "/usr/sbin/nats-server"
	RabbitMQServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	EPMD           = "/usr/bin/epmd"
)

// startTimeout bounds a broker's start: RabbitMQ takes 5 to 10 s on a
// loaded machine.
const startTimeout = 2 * time.Minute

// Server is a broker run as a child process.
type Server struct {
	Name string // "nats-server" or "rabbitmq-server"
	Port int    // the client port
	URL  string // nats://127.0.0.1:PORT or amqp://guest:guest@127.0.0.1:PORT/
	Dir  string // data and logs

	command func() *exec.Cmd
	ready   func(ctx context.Context) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// need returns bin's path, or skips t (fails it under CI) when bin is
// missing.
func need(t testing.TB, bin, pkg string) string {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		if p, lerr := exec.LookPath(filepath.Base(bin)); lerr == nil {
			return p
		}
		if testdb.InCI() {
			t.Fatalf("CI=true and %s is missing (apt-get install %s): %v", bin, pkg, err)
		}
		t.Skipf("%s is missing (apt-get install %s)", bin, pkg)
	}
	return bin
}

// StartNATS starts nats-server with JetStream on a free loopback port and
// returns it once JetStream answers; it is stopped when t ends.
func StartNATS(t testing.TB) *Server {
	t.Helper()
	bin := need(t, NATSServer, "nats-server")
	port, err := ports.One()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Name: "nats-server", Port: port, URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Dir: t.TempDir()}
	s.command = func() *exec.Cmd {
		return exec.Command(bin, "-js", "-sd", filepath.Join(s.Dir, "js"), "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	}
	s.ready = func(ctx context.Context) error {
		nc, err := nats.Connect(s.URL, nats.Timeout(time.Second), nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	}
	s.startOrFail(t)
	return s
}

// StartRabbitMQ starts a RabbitMQ node of its own (a unique node name, its
// own epmd, distribution port, Mnesia and log dirs, no plugins) on a free
// loopback port and returns it once it answers an AMQP handshake as
// guest; it is stopped, with its epmd, when t ends.
func StartRabbitMQ(t testing.TB) *Server {
	t.Helper()
	bin := need(t, RabbitMQServer, "rabbitmq-server")
	epmdBin := need(t, EPMD, "erlang-base (rabbitmq-server's dependency)")
	p, err := ports.Free(3)
	if err != nil {
		t.Fatal(err)
	}
	port, distPort, epmdPort := p[0], p[1], p[2]
	s := &Server{Name: "rabbitmq-server", Port: port, URL: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port), Dir: t.TempDir()}
	files := map[string]string{
		// The node's settings come from here, not from /etc/rabbitmq.
		"env.conf":        "",
		"rabbitmq.conf":   fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\n", port),
		"enabled_plugins": "[].\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An epmd of the node's own, so that nothing of the machine's is
	// started or used, and it is stopped by pid at the end.
	epmd := exec.Command(epmdBin, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
	epmd.SysProcAttr = procAttr()
	if err := epmd.Start(); err != nil {
		t.Fatalf("epmd: %v", err)
	}
	epmdDone := make(chan struct{})
	go func() { _ = epmd.Wait(); close(epmdDone) }()
	t.Cleanup(func() {
		_ = epmd.Process.Kill()
		<-epmdDone
	})
	node := fmt.Sprintf("sqlonce%d@localhost", port)
	env := append(os.Environ(),
		"HOME="+s.Dir, // the Erlang cookie
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(s.Dir, "env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(s.Dir, "rabbitmq"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(s.Dir, "enabled_plugins"),
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"ERL_EPMD_PORT="+strconv.Itoa(epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE="+filepath.Join(s.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(s.Dir, "log"),
		// The script then execs the Erlang VM in place of itself (no
		// shell in between to forward signals), so that the pid is the
		// node's; -noinput keeps the Erlang shell off stdin.
		"RABBITMQ_ALLOW_INPUT=1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput -kernel inet_dist_use_interface {127,0,0,1}",
	)
	s.command = func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = env
		return cmd
	}
	s.ready = func(ctx context.Context) error {
		conn, err := amqp.DialConfig(s.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err != nil {
			return err
		}
		return conn.Close()
	}
	s.startOrFail(t)
	return s
}

// startOrFail starts s and registers its stop with t.
func (s *Server) startOrFail(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		_ = s.Kill()
		if t.Failed() {
			t.Logf("%s on %d, the end of its logs:\n%s", s.Name, s.Port, s.logTail())
		}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
}

// Start starts the server (again, after Kill: same port, same data) and
// waits until it answers.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("%s on %d: already running", s.Name, s.Port)
	}
	logf, err := os.OpenFile(filepath.Join(s.Dir, s.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: a ^C to the test does not reach it.
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.log = cmd, exited, logf

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		select {
		case <-exited:
			s.cmd = nil
			logf.Close()
			return fmt.Errorf("%s exited while starting (%v): %s", s.Name, cmd.ProcessState, s.logTail())
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.ready(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			s.killLocked()
			return fmt.Errorf("%s did not answer on port %d within %v: %v: %s", s.Name, s.Port, startTimeout, err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server cleanly (SIGTERM, by pid) and waits for it to
// exit, killing it after a minute. Start runs it again.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.killLocked()
		return nil
	}
	select {
	case <-s.exited:
		s.log.Close()
		s.cmd = nil
		return nil
	case <-time.After(time.Minute):
		s.killLocked()
		return fmt.Errorf("%s on %d ignored SIGTERM for a minute; killed", s.Name, s.Port)
	}
}

// Kill kills the server with SIGKILL, by pid, and waits for it to exit:
// a crash, nothing flushed or closed. Start runs it again.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.killLocked()
	return nil
}

func (s *Server) killLocked() {
	_ = s.cmd.Process.Kill() // an error: it exited already, and Wait returns
	<-s.exited
	s.log.Close()
	s.cmd = nil
}

// Running reports whether the server's process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// logTail is the end of the server's output and of its logs (RabbitMQ
// writes its own under log/), for an error.
func (s *Server) logTail() string {
	files, _ := filepath.Glob(filepath.Join(s.Dir, "log", "*.log"))
	files = append([]string{filepath.Join(s.Dir, s.Name+".log")}, files...)
	var sb strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		fmt.Fprintf(&sb, "--- %s:\n%s\n", filepath.Base(f), bytes.TrimSpace(b))
	}
	return strings.TrimSpace(sb.String())
}
