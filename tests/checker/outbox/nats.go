package outbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// natsServer is a nats-server with JetStream, a child process of the test
// on a free loopback port, its streams in a directory of its own so that a
// server killed with SIGKILL and started again finds them.
type natsServer struct {
	bin, dir, log string
	port          int
	cmd           *exec.Cmd
	exited        chan struct{}
}

// natsBinEnv names the nats-server binary when it is not on PATH or in
// /usr/sbin.
const natsBinEnv = "SQLONCE_NATS_SERVER"

func natsBin() (string, error) {
	if b := os.Getenv(natsBinEnv); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b, nil
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server", nil
	}
	return "", fmt.Errorf("no nats-server on PATH or in /usr/sbin (apt-get install nats-server, or set %s)", natsBinEnv)
}

// startNATS starts a nats-server with JetStream, its store under dir.
func startNATS(dir string) (*natsServer, error) {
	bin, err := natsBin()
	if err != nil {
		return nil, err
	}
	port, err := ports.One()
	if err != nil {
		return nil, err
	}
	s := &natsServer{bin: bin, dir: filepath.Join(dir, "jetstream"), log: filepath.Join(dir, "nats-server.log"), port: port}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	return s, s.start()
}

// URL is the server's client URL.
func (s *natsServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Pid is the running server's process id.
func (s *natsServer) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *natsServer) start() error {
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir, "-l", s.log)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.exited) }()
	// Ready once it accepts connections; JetStream has recovered its
	// streams by then (the server listens for clients last).
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("nats-server exited at start: %s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			_ = s.Kill()
			return fmt.Errorf("nats-server not listening on %d after 20s: %s", s.port, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends sig to the server and waits for it to exit.
func (s *natsServer) stop(sig syscall.Signal) error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *natsServer) Kill() error { return s.stop(syscall.SIGKILL) }

// Restart kills the server with SIGKILL, leaves it down for down, and
// starts it again on the same port and store.
func (s *natsServer) Restart(_ context.Context, down time.Duration) error {
	if err := s.Kill(); err != nil {
		return err
	}
	time.Sleep(down)
	return s.start()
}

// Stop stops the server (SIGTERM).
func (s *natsServer) Stop() { _ = s.stop(syscall.SIGTERM) }

func (s *natsServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
