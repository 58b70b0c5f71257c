// Package galera runs a MariaDB Galera cluster for the tests: three
// mariadbd nodes with wsrep on, as child processes on data dirs of their
// own in a temp dir, on free loopback ports (mysqld, gcomm, IST and SST
// distinct per node). Node 1 bootstraps the cluster (--wsrep-new-cluster);
// each next node starts once the previous one reports wsrep_ready=ON and
// joins it by state transfer (rsync). A node can be killed with SIGKILL and
// started again: it rejoins by IST from a peer's gcache, or by SST.
//
// It needs Debian's galera-4 and rsync and root (mariadbd refuses to run
// as root; it is started as the mysql user on data dirs that user owns, and
// dies with the test process). Shared starts one cluster per test process; under CI=true a
// cluster that does not come up fails the test, elsewhere the test is
// skipped naming why.
package galera

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

	_ "github.com/go-sql-driver/mysql" // the ping

	"github.com/sqlonce/sqlonce/tests/internal/ports"
)

// Where Debian puts what a node needs.
const (
	mariadbd         = "/usr/sbin/mariadbd"
	mariadbInstallDB = "/usr/bin/mariadb-install-db"
	provider         = "/usr/lib/galera/libgalera_smm.so"
	sstRsync         = "/usr/bin/wsrep_sst_rsync"
	rsync            = "/usr/bin/rsync"
)

// readyTimeout bounds a node's start, state transfer included.
const readyTimeout = 2 * time.Minute

// Cluster is a running Galera cluster.
type Cluster struct {
	dir   string
	Nodes []*Node
	// Started is how long the cluster took to come up, all nodes ready.
	Started time.Duration
}

// Node is one mariadbd of the cluster.
type Node struct {
	N     int // 1-based
	Port  int // mysqld
	gcomm int
	ist   int
	sst   int
	dir   string // data, socket and log
	peers string // gcomm:// address of the whole cluster
	uid   uint32 // the mysql user's, which mariadbd runs as
	gid   uint32

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	log    *os.File
}

// Start starts a cluster of n nodes, one after the other. On error every
// node started is stopped and the temp dir removed.
func Start(n int) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("galera: not root: mariadbd refuses to run as root and needs root to change to the mysql user")
	}
	for _, b := range []string{mariadbd, mariadbInstallDB, provider, sstRsync, rsync} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("galera: %w (apt-get install galera-4 rsync mariadb-server)", err)
		}
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("galera: user mysql: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "sqlonce-galera-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ps, err := ports.Free(4 * n)
	if err != nil {
		return nil, err
	}
	var gcomms []string
	for i := range n {
		gcomms = append(gcomms, fmt.Sprintf("127.0.0.1:%d", ps[4*i+1]))
	}
	for i := range n {
		nd := &Node{N: i + 1, Port: ps[4*i], gcomm: ps[4*i+1], ist: ps[4*i+2], sst: ps[4*i+3],
			dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), peers: "gcomm://" + strings.Join(gcomms, ","),
			uid: uint32(uid), gid: uint32(gid)}
		if err := os.MkdirAll(filepath.Join(nd.dir, "data"), 0o755); err != nil {
			return c, err
		}
		for _, p := range []string{dir, nd.dir, filepath.Join(nd.dir, "data")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return c, err
			}
		}
		c.Nodes = append(c.Nodes, nd)
	}
	// Only the bootstrap node needs system tables: the others receive
	// everything by SST.
	install := exec.Command(mariadbInstallDB, "--no-defaults", "--datadir="+filepath.Join(c.Nodes[0].dir, "data"),
		"--user=mysql", "--auth-root-authentication-method=normal", "--skip-test-db",
		// Its own temp dir: servers installed at once in the shared /tmp
		// have collided on a temp table's file name.
		"--tmpdir="+c.Nodes[0].dir)
	install.Env = env()
	if out, err := install.CombinedOutput(); err != nil {
		return c, fmt.Errorf("galera: mariadb-install-db: %w: %s", err, out)
	}
	began := time.Now()
	for _, nd := range c.Nodes {
		if err := nd.start(nd.N == 1); err != nil {
			return c, err
		}
	}
	c.Started = time.Since(began)
	return c, nil
}

// DSN is a go-sql-driver/mysql DSN for database db on node i (1-based),
// with parseTime=true and params appended ("wsrep_sync_wait=1").
func (c *Cluster) DSN(i int, db string, params ...string) string {
	q := append([]string{"parseTime=true"}, params...)
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?%s", c.Nodes[i-1].Port, db, strings.Join(q, "&"))
}

// GeneralLogEnv names a directory, writable by the mysql user, where each
// node writes its general query log (node1.log, ...) when it is set: every
// statement each session sent, in the order the node received them, to
// trace a checker violation to the statements behind it.
const GeneralLogEnv = "SQLONCE_GALERA_LOG"

// Params are the DSN parameters docs/deployments.md tells a Galera user to
// set, without which mysqldriver refuses every call on a node:
// wsrep_sync_wait=1, so that a read sees what other nodes committed, and
// interpolateParams=true, so that go-sql-driver/mysql sends statements as
// text rather than preparing them inside a transaction (a node loses the
// abort of a transaction while it prepares).
var Params = []string{"wsrep_sync_wait=1", "interpolateParams=true"}

// DSNs is DSN for every node, in order.
func (c *Cluster) DSNs(db string, params ...string) []string {
	var out []string
	for i := range c.Nodes {
		out = append(out, c.DSN(i+1, db, params...))
	}
	return out
}

// Kill kills node i (1-based) with SIGKILL and waits for it to exit: a
// crash, its peers carry on without it.
func (c *Cluster) Kill(i int) error { return c.Nodes[i-1].stop(syscall.SIGKILL) }

// Restart starts node i (1-based) again after Kill and waits until it has
// rejoined the cluster (wsrep_ready=ON). As Debian's galera_recovery does,
// it first recovers the node's last committed position from InnoDB
// (mariadbd --wsrep-recover), so that the node asks its peers for the
// write sets it missed (IST) instead of a full copy (SST).
func (c *Cluster) Restart(i int) error {
	nd := c.Nodes[i-1]
	pos, err := nd.recoverPosition()
	if err != nil {
		return err
	}
	return nd.start(false, "--wsrep-start-position="+pos)
}

// Stop stops every node by pid (SIGTERM, SIGKILL after 30 s), last first,
// and removes the temp dir.
func (c *Cluster) Stop() {
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		_ = c.Nodes[i].stop(syscall.SIGTERM)
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// Pid is node i's process id, 0 while it is down.
func (c *Cluster) Pid(i int) int {
	nd := c.Nodes[i-1]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

func env() []string { return []string{"LANG=C", "LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"} }

func (nd *Node) args(bootstrap bool, extra ...string) []string {
	data := filepath.Join(nd.dir, "data")
	a := []string{"--no-defaults", "--user=mysql", "--datadir=" + data,
		"--socket=" + filepath.Join(nd.dir, "s.sock"), "--pid-file=" + filepath.Join(nd.dir, "mariadbd.pid"),
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(nd.Port), "--tmpdir=" + nd.dir,
		"--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
		"--innodb-buffer-pool-size=64M", "--max-connections=300",
		"--wsrep-on=ON", "--wsrep-provider=" + provider,
		"--wsrep-cluster-name=sqlonce", "--wsrep-cluster-address=" + nd.peers,
		fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", nd.gcomm),
		fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=64M", nd.gcomm, nd.ist),
		fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", nd.sst), "--wsrep-sst-method=rsync",
	}
	if dir := os.Getenv(GeneralLogEnv); dir != "" {
		a = append(a, "--general-log=1", fmt.Sprintf("--general-log-file=%s/node%d.log", dir, nd.N))
	}
	if bootstrap {
		a = append(a, "--wsrep-new-cluster")
	}
	return append(a, extra...)
}

// start runs the node and waits until it reports wsrep_ready=ON.
func (nd *Node) start(bootstrap bool, extra ...string) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		return fmt.Errorf("galera: node %d is running", nd.N)
	}
	logf, err := os.OpenFile(filepath.Join(nd.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(mariadbd, nd.args(bootstrap, extra...)...)
	cmd.Env = env()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr(nd.uid, nd.gid)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("galera: node %d: %w", nd.N, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	nd.cmd, nd.exited, nd.log = cmd, exited, logf

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", nd.Port)
	for {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("galera: node %d exited while starting (%v): %s", nd.N, err, nd.logTail())
		default:
		}
		err := ready(ctx, dsn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("galera: node %d not ready on port %d after %v: %v: %s", nd.N, nd.Port, readyTimeout, err, nd.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recoverPosition runs InnoDB's crash recovery on the stopped node and
// returns the position (uuid:seqno) of its last committed write set.
func (nd *Node) recoverPosition() (string, error) {
	cmd := exec.Command(mariadbd, nd.args(false, "--wsrep-recover", "--log-error="+filepath.Join(nd.dir, "recover.log"))...)
	cmd.Env = env()
	cmd.SysProcAttr = procAttr(nd.uid, nd.gid)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("galera: node %d: mariadbd --wsrep-recover: %w: %s", nd.N, err, out)
	}
	b, err := os.ReadFile(filepath.Join(nd.dir, "recover.log"))
	if err != nil {
		return "", err
	}
	const marker = "WSREP: Recovered position: "
	i := strings.LastIndex(string(b), marker)
	if i < 0 {
		return "", fmt.Errorf("galera: node %d: no recovered position in: %s", nd.N, b)
	}
	pos, _, _ := strings.Cut(string(b[i+len(marker):]), "\n")
	return strings.TrimSpace(pos), nil
}

// ready reports nil once the node answers and says wsrep_ready=ON.
func ready(ctx context.Context, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var name, value string
	if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_ready'").Scan(&name, &value); err != nil {
		return err
	}
	if value != "ON" {
		return fmt.Errorf("wsrep_ready=%s", value)
	}
	return nil
}

// stop signals the node by pid and waits for it to exit (SIGKILL after
// 30 s, or at once when the signal cannot be sent): the node is forgotten
// only once it has exited. A node already down is not an error.
func (nd *Node) stop(sig syscall.Signal) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return nil
	}
	defer func() {
		nd.log.Close()
		nd.cmd = nil
	}()
	if err := nd.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = nd.cmd.Process.Kill()
		<-nd.exited
		return fmt.Errorf("galera: node %d: %v: %w; killed", nd.N, sig, err)
	}
	select {
	case <-nd.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.exited
		return fmt.Errorf("galera: node %d ignored %v for 30s; killed", nd.N, sig)
	}
}

func (nd *Node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(nd.dir, "node.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}
