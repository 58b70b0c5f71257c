// Package dbserver starts throwaway PostgreSQL and MariaDB servers from
// Debian's binaries as child processes: each on a data dir of its own in
// a temp dir, on a loopback port from package ports, stopped by pid. The
// servers refuse to run as root, so the tests must run as root to start
// them as the postgres and mysql users.
package dbserver

import (
	"context"
	"database/sql"
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

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// Where Debian puts the servers.
const (
	PgBin            = "/usr/lib/postgresql/15/bin"
	Mariadbd         = "/usr/sbin/mariadbd"
	MariadbInstallDB = "/usr/bin/mariadb-install-db"
)

// Server is a database server run as a child process on a data dir of its
// own.
type Server struct {
	Name string
	Dir  string // owned by the server's user; data, socket and log live here
	Port int
	DSN  string // as the superuser (postgres, root)

	command func() *exec.Cmd
	ping    func(ctx context.Context) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	logf   *os.File
}

// Start runs the server and waits until it answers (up to a minute).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: a ^C to the test does not reach it, and
	// Stop decides how it ends.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", s.Name, err)
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
			return fmt.Errorf("%s exited while starting (%v): %s", s.Name, err, s.LogTail())
		default:
		}
		if err := s.ping(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("%s did not answer on port %d: %v: %s", s.Name, s.Port, err, s.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop signals the server by pid and waits for it to exit (SIGKILL after
// 30 s).
func (s *Server) Stop(sig syscall.Signal) error {
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
		return fmt.Errorf("%s ignored %v for 30s; killed", s.Name, sig)
	}
}

// Remove stops the server (SIGTERM) and removes its directory.
func (s *Server) Remove() {
	_ = s.Stop(syscall.SIGTERM)
	os.RemoveAll(s.Dir)
}

// Pid is the server's process id, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// LogTail is the end of the server's log, for an error message.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
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
	dir, err = os.MkdirTemp("", "sqlonce-server-"+userName+"-")
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

// NewPostgres initialises a cluster in a temp dir and starts it, with
// settings (each "name=value", passed as -c) after the defaults. Stopping
// it with SIGQUIT is PostgreSQL's immediate shutdown: no checkpoint, crash
// recovery at the next start.
func NewPostgres(settings ...string) (*Server, error) {
	dir, uid, gid, err := prepare("postgres", filepath.Join(PgBin, "initdb"), filepath.Join(PgBin, "postgres"))
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := run(asUser(exec.Command(filepath.Join(PgBin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale=C"), uid, gid)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return startPostgres("postgres", dir, uid, gid, settings)
}

// NewStandby makes a hot standby of primary (pg_basebackup -R: it streams
// from primary, asynchronously unless primary names it in
// synchronous_standby_names; its application_name is name) and starts it.
func NewStandby(primary *Server, name string, settings ...string) (*Server, error) {
	dir, uid, gid, err := prepare("postgres", filepath.Join(PgBin, "pg_basebackup"))
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := run(asUser(exec.Command(filepath.Join(PgBin, "pg_basebackup"), "-D", data, "-R", "-X", "stream",
		"--no-sync", "-c", "fast", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres",
		"-d", "application_name="+name), uid, gid)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return startPostgres(name, dir, uid, gid, settings)
}

func startPostgres(name, dir string, uid, gid int, settings []string) (*Server, error) {
	data := filepath.Join(dir, "data")
	port, err := ports.One()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Name: name, Dir: dir, Port: port,
		DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=150"}
	for _, set := range settings {
		args = append(args, "-c", set)
	}
	s.command = func() *exec.Cmd {
		return asUser(exec.Command(filepath.Join(PgBin, "postgres"), args...), uid, gid)
	}
	s.ping = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Promote promotes a standby (pg_ctl promote, which waits until it takes
// writes).
func (s *Server) Promote() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return run(asUser(exec.Command(filepath.Join(PgBin, "pg_ctl"), "promote", "-w", "-t", "120",
		"-D", filepath.Join(s.Dir, "data")), uid, gid))
}

// NewMariaDB installs a data dir in a temp dir and starts mariadbd, which
// drops to the mysql user itself, with options (each "--name=value")
// after the defaults. It runs with the binary log and sync_binlog=1, as
// docs/deployments.md asks of MariaDB: without it InnoDB makes a commit
// visible before its redo log is on disk, and SIGKILL can lose a commit
// another session has read. Stopping it with SIGKILL is a crash: InnoDB
// recovers from its redo log at the next start.
func NewMariaDB(options ...string) (*Server, error) {
	dir, _, _, err := prepare("mysql", Mariadbd, MariadbInstallDB)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// Its own temp dir, for the install and the server: a starting
	// mariadbd deletes the #sql* files it finds in its temp dir, and in
	// the shared /tmp those are the temp tables other servers are using
	// (the local MariaDB's: a batch claim beside a restart test failed
	// with "Error on delete of '/tmp/#sql-temptable-...'").
	if err := run(exec.Command(MariadbInstallDB, "--no-defaults", "--datadir="+data, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--tmpdir="+dir)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	port, err := ports.One()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Name: "mariadb", Dir: dir, Port: port,
		DSN: fmt.Sprintf("root@tcp(127.0.0.1:%d)/?parseTime=true", port)}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--user=mysql",
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "s.sock"),
		"--pid-file=" + filepath.Join(dir, "mariadbd.pid"), "--log-bin=" + filepath.Join(dir, "binlog"), "--sync-binlog=1",
		"--server-id=1", "--max-connections=200", "--innodb-buffer-pool-size=64M", "--tmpdir=" + dir}, options...)
	s.command = func() *exec.Cmd { return exec.Command(Mariadbd, args...) }
	s.ping = func(ctx context.Context) error {
		db, err := sql.Open("mysql", s.DSN)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}
