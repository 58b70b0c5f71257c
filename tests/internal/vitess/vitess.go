// Package vitess starts a Vitess test cluster (vttestserver: vtgate,
// vttablets and vtctld in one vtcombo process over one mysqld) as a child
// process: a sharded keyspace on loopback ports from package ports, run as
// the mysql user (mysqlctl refuses root), stopped by pid.
//
// The binaries come from .ci/vitess-build, which builds Vitess from the Go
// module proxy into a cache directory once per machine; SQLONCE_VITESS_ROOT
// names another directory of the same shape (bin/ and config/).
package vitess

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

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// Version is the Vitess release .ci/vitess-build builds.
const Version = "v0.24.4"

// DefaultRoot is where .ci/vitess-build leaves it.
const DefaultRoot = "/var/cache/sqlonce/vitess-" + Version

// Keyspace is the sharded keyspace every cluster serves.
const Keyspace = "ks"

// Cluster is a running vttestserver.
type Cluster struct {
	Root   string // VTROOT: bin/ and config/
	Dir    string // data dir (VTDATAROOT), owned by the mysql user
	Base   int    // vttestserver --port
	Port   int    // vtgate's MySQL port
	Shards int
	// Started is how long the cluster took to answer.
	Started time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	logf   *os.File
}

// Root returns the directory holding the binaries, or an error saying how
// to get them.
func Root() (string, error) {
	root := os.Getenv("SQLONCE_VITESS_ROOT")
	if root == "" {
		root = DefaultRoot
	}
	for _, b := range []string{"bin/vttestserver", "bin/vtcombo", "bin/mysqlctl", "config/init_db.sql"} {
		if _, err := os.Stat(filepath.Join(root, b)); err != nil {
			return "", fmt.Errorf("no Vitess %s build at %s (run .ci/vitess-build, or set SQLONCE_VITESS_ROOT): %w", Version, root, err)
		}
	}
	return root, nil
}

// Start runs vttestserver with a keyspace of shards shards and waits until
// vtgate serves a primary tablet of each (up to two minutes).
func Start(shards int) (c *Cluster, err error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("not root: mysqlctl refuses to run as root and the test needs root to run it as the mysql user")
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("user mysql: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "sqlonce-vitess-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	// vttestserver takes base..base+3: vtcombo's web and gRPC ports,
	// mysqld's, vtgate's MySQL port (vttest.Environment.PortForProtocol).
	base, err := ports.Run(4)
	if err != nil {
		return nil, err
	}
	c = &Cluster{Root: root, Dir: dir, Base: base, Port: base + 3, Shards: shards}
	logf, err := os.Create(filepath.Join(dir, "vttestserver.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(root, "bin", "vttestserver"),
		"--port", strconv.Itoa(base),
		"--keyspaces", Keyspace,
		"--num-shards", strconv.Itoa(shards),
		// With one replica per shard vtgate waits ~30 s for a REPLICA
		// tablet before it serves; with two it does not.
		"--replica-count", "2",
		"--rdonly-count", "0",
		"--mysql-bind-host", "127.0.0.1",
		"--vtcombo-bind-host", "127.0.0.1",
		"--data-dir", filepath.Join(dir, "data"),
		"--vschema-ddl-authorized-users", "%",
		// vttablet's transaction killer ends a transaction older than
		// this (30 s by default). On a loaded CI machine a case's
		// transaction (DedupeReplay/LargestLimit records a 16 MB
		// response) took longer, and the killer, not the code under
		// test, failed it. The tests that need a transaction ended
		// kill it themselves.
		"--queryserver-config-transaction-timeout", "5m",
	)
	cmd.Dir = dir
	cmd.Env = []string{
		"LANG=C", "LC_ALL=C", "PATH=" + filepath.Join(root, "bin") + ":/usr/sbin:/usr/bin:/sbin:/bin",
		"VTROOT=" + root, "VTDATAROOT=" + filepath.Join(dir, "data"), "VT_MYSQL_ROOT=/usr",
		"HOME=" + dir, "TMPDIR=" + filepath.Join(dir, "tmp"),
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own, so that Stop can reach mysqld and
	// vtcombo, vttestserver's children, if vttestserver dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		Pdeathsig:  syscall.SIGTERM,
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("vttestserver: %w", err)
	}
	c.cmd, c.logf, c.exited = cmd, logf, make(chan error, 1)
	go func() { c.exited <- cmd.Wait() }()
	if err := c.wait(2 * time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	c.Started = time.Since(start)
	return c, nil
}

// wait polls vtgate until each shard's primary tablet serves.
func (c *Cluster) wait(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	db, err := sql.Open("mysql", c.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	var last error
	for {
		select {
		case err := <-c.exited:
			c.exited <- err
			return fmt.Errorf("vttestserver exited while starting (%v): %s", err, c.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("vttestserver: vtgate on port %d did not serve %d primary tablets in %v (%v): %s", c.Port, c.Shards, limit, last, c.LogTail())
		case <-time.After(200 * time.Millisecond):
		}
		n, err := c.servingPrimaries(ctx, db)
		if err == nil && n >= c.Shards {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%d of %d primaries serving", n, c.Shards)
		}
	}
}

func (c *Cluster) servingPrimaries(ctx context.Context, db *sql.DB) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SHOW VITESS_TABLETS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		var keyspace, typ, state string
		for i, col := range cols {
			switch strings.ToLower(col) {
			case "keyspace":
				keyspace = vals[i].String
			case "tablettype":
				typ = vals[i].String
			case "state":
				state = vals[i].String
			}
		}
		if keyspace == Keyspace && typ == "PRIMARY" && state == "SERVING" {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// A query that reaches every shard proves vtgate routes to them.
	if n >= c.Shards {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1 FROM dual").Scan(&one); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// DSN is a go-sql-driver/mysql DSN for vtgate, as root without a password,
// on the keyspace (or on no database when db is ""), with params
// ("name=value") appended.
func (c *Cluster) DSN(db string, params ...string) string {
	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", c.Port, db)
	if len(params) > 0 {
		dsn += "?" + strings.Join(params, "&")
	}
	return dsn
}

// Pid is vttestserver's process id, 0 when it is not running.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Stop sends SIGTERM to vttestserver (it stops vtcombo and mysqld and
// removes the data dir), waits up to 30 s, then kills what is left of its
// process group, and removes the temp dir.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	pid := c.cmd.Process.Pid
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-c.exited
	}
	// Children that outlived it (the group is vttestserver's own).
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	c.logf.Close()
	c.cmd = nil
	os.RemoveAll(c.Dir)
}

// LogTail is the end of vttestserver's log, for an error message.
func (c *Cluster) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "vttestserver.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}

// MySQLDSN is a go-sql-driver/mysql DSN for the mysqld behind every
// tablet itself, on its unix socket as vt_dba (vttestserver's
// administrator, no password), bypassing vtgate: for what a client of
// vtgate cannot do, such as killing a tablet's connection.
func (c *Cluster) MySQLDSN() (string, error) {
	socks, err := filepath.Glob(filepath.Join(c.Dir, "data", "*", "mysql.sock"))
	if err != nil {
		return "", err
	}
	if len(socks) == 0 {
		return "", fmt.Errorf("vitess: no mysql.sock under %s", filepath.Join(c.Dir, "data"))
	}
	return fmt.Sprintf("vt_dba@unix(%s)/", socks[0]), nil
}
