// Package haproxy runs a HAProxy for the tests, in TCP mode in front of
// database servers: the first server the writer, the others backups in
// order (only the first healthy one takes connections), as a Galera
// cluster is run with one writer. HAProxy checks each server's port
// every half second and marks it down after two failures, closing the
// sessions it held. It runs as a child process on a free loopback port,
// stopped by pid.
//
// It needs Debian's haproxy.
package haproxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

const binary = "/usr/sbin/haproxy"

// Proxy is a running HAProxy.
type Proxy struct {
	Port   int // where clients connect
	dir    string
	cmd    *exec.Cmd
	exited chan error
}

// Config is the HAProxy configuration Start writes: TCP mode, backends
// on servers (loopback ports), the first one active, the next ones
// backups.
func Config(port int, servers []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
	maxconn 1000
defaults
	mode tcp
	timeout connect 2s
	timeout client 10m
	timeout server 10m
listen db
	bind 127.0.0.1:%d
	option tcpka
	default-server inter 500 fall 2 rise 2 on-marked-down shutdown-sessions
`, port)
	for i, p := range servers {
		backup := ""
		if i > 0 {
			backup = " backup"
		}
		fmt.Fprintf(&b, "\tserver s%d 127.0.0.1:%d check%s\n", i+1, p, backup)
	}
	return b.String()
}

// Start runs HAProxy in front of servers and waits until it accepts
// connections.
func Start(servers []int) (*Proxy, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("haproxy: %w (apt-get install haproxy)", err)
	}
	ps, err := ports.Free(1)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sqlonce-haproxy-")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Port: ps[0], dir: dir}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(Config(p.Port, servers)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	// -db: in the foreground, not a daemon.
	p.cmd = exec.Command(binary, "-db", "-f", cfg)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-p.exited:
			p.exited <- err
			b, _ := os.ReadFile(filepath.Join(dir, "haproxy.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("haproxy exited while starting (%v): %s", err, b)
		default:
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.Port), time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("haproxy: not listening on %d: %v", p.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops HAProxy by pid (SIGTERM, SIGKILL after 10 s) and removes its
// directory.
func (p *Proxy) Stop() {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	os.RemoveAll(p.dir)
}
