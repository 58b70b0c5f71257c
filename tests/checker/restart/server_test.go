package restart

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

// Where Debian puts the servers.
const (
	pgBin            = "/usr/lib/postgresql/15/bin"
	mariadbd         = "/usr/sbin/mariadbd"
	mariadbInstallDB = "/usr/bin/mariadb-install-db"
)

// server is a database server run as a child process on a data dir of its
// own.
type server struct {
	name    string
	dir     string // owned by the server's user; data, socket and log live here
	port    int
	dsn     string
	command func() *exec.Cmd
	ping    func(ctx context.Context) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	logf   *os.File
}

// start runs the server and waits until it answers.
func (s *server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: a ^C to the test does not reach it, and
	// stop decides how it ends.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", s.name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd, s.exited, s.logf = cmd, exited, logf

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("%s exited while starting (%v): %s", s.name, err, s.logTail())
		default:
		}
		if err := s.ping(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("%s did not answer on port %d: %v: %s", s.name, s.port, err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop signals the server by pid and waits for it to exit (SIGKILL after
// 30 s).
func (s *server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	defer func() {
		s.logf.Close()
		s.cmd = nil
	}()
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("%s ignored %v for 30s; killed", s.name, sig)
	}
}

func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// prepare checks what a throwaway server needs and makes a temp dir that
// the server's user owns. The "why not" answer is the skip message.
func prepare(userName string, bins ...string) (dir string, uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return "", 0, 0, errors.New("not root: the servers refuse to run as root and need root to change user")
	}
	for _, b := range bins {
		if _, err := os.Stat(b); err != nil {
			return "", 0, 0, fmt.Errorf("server binary missing: %w", err)
		}
	}
	u, err := user.Lookup(userName)
	if err != nil {
		return "", 0, 0, fmt.Errorf("user %s: %w", userName, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	dir, err = os.MkdirTemp("", "sqlonce-restart-"+userName+"-")
	if err != nil {
		return "", 0, 0, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return "", 0, 0, err
	}
	return dir, uid, gid, nil
}

func asUser(cmd *exec.Cmd, uid, gid int) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	cmd.Env = []string{"LANG=C", "LC_ALL=C", "PATH=/usr/bin:/bin"}
	return cmd
}

func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// newPostgres initialises a cluster in a temp dir and starts it. Stopping
// it with SIGQUIT is PostgreSQL's immediate shutdown: no checkpoint, crash
// recovery at the next start.
func newPostgres() (*server, error) {
	dir, uid, gid, err := prepare("postgres", filepath.Join(pgBin, "initdb"), filepath.Join(pgBin, "postgres"))
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := run(asUser(exec.Command(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C"), uid, gid)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{name: "postgres", dir: dir, port: port,
		dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	s.command = func() *exec.Cmd {
		return asUser(exec.Command(filepath.Join(pgBin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=150",
			// The workload deadlocks on purpose, and every claim of the
			// keys involved queues behind each detection: the default 1s
			// makes the queues, not the restarts, the slow part.
			"-c", "deadlock_timeout=200ms"), uid, gid)
	}
	s.ping = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.dsn)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// newMariaDB installs a data dir in a temp dir and starts mariadbd, which
// drops to the mysql user itself. Stopping it with SIGKILL is a crash:
// InnoDB recovers from its redo log at the next start.
func newMariaDB() (*server, error) {
	dir, _, _, err := prepare("mysql", mariadbd, mariadbInstallDB)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := run(exec.Command(mariadbInstallDB, "--no-defaults", "--datadir="+data, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{name: "mariadb", dir: dir, port: port,
		dsn: fmt.Sprintf("root@tcp(127.0.0.1:%d)/?parseTime=true", port)}
	// The binary log with sync_binlog=1, as docs/deployments.md asks of
	// MariaDB: without it InnoDB makes a commit visible before its redo
	// log is on disk, and SIGKILL can lose a commit another session has
	// read (an AlreadyDone replayed for work the crash then undid).
	s.command = func() *exec.Cmd {
		return exec.Command(mariadbd, "--no-defaults", "--datadir="+data, "--user=mysql",
			"--port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(dir, "s.sock"),
			"--pid-file="+filepath.Join(dir, "mariadbd.pid"), "--log-bin="+filepath.Join(dir, "binlog"), "--sync-binlog=1",
			"--server-id=1", "--max-connections=200", "--innodb-buffer-pool-size=64M")
	}
	s.ping = func(ctx context.Context) error {
		db, err := sql.Open("mysql", s.dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}
