// Package galera runs the exactly-once checker on a three-node MariaDB
// Galera cluster: every worker sends each attempt to the next node in
// turn, and one node is killed with SIGKILL and started again mid-run.
package galera

import (
	"context"
	"database/sql"
	"flag"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

var durationFlag = flag.Duration("checker.duration", 0, "run length of the workload (default 20s; or set "+checker.DurationEnv+")")

func TestMain(m *testing.M) {
	flag.Parse()
	// Connections die with the killed node; the driver's log of each one
	// is noise.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	galera.StopShared()
	os.Exit(code)
}

// killed is the node the run kills and restarts: not the first, through
// which the checker reads the outcome back.
const killed = 3

// TestGalera runs every workload over the three nodes, with the checker's
// faults, and kills node 3 a quarter into the run and starts it again at
// once: it rejoins by IST while the workers go on. Sessions read with
// wsrep_sync_wait=1 and send statements as text (interpolateParams=true),
// as docs/deployments.md tells Galera users to set.
func TestGalera(t *testing.T) {
	c := galera.Shared(t)
	dbs := harness.MySQLNodes(t, 40, c.DSNs("", galera.Params...)...)
	d := checker.Duration(t, *durationFlag, 20*time.Second)
	restarted := false
	rep := checker.Run(t, dbs[0], checker.Config[*sql.Tx]{
		Ops:          checker.Ops(t, dbs[0].Dialect()),
		Workers:      48,
		Duration:     d,
		Nodes:        dbs[1:],
		ConnectRetry: 5 * time.Second,
		// A read waits for its node to apply what the cluster committed
		// (wsrep_sync_wait) for up to Galera's repl.causal_read_timeout,
		// 30 s, and the cluster can stall for many seconds while the
		// killed node rejoins: one Do and RunBatch run of 15 had an
		// attempt run past 30 s, retrying through such a stall. The server's timeout, not the
		// checker's, must end such a wait.
		AttemptTimeout: time.Minute,
		During: func(ctx context.Context, logf func(string, ...any)) {
			time.Sleep(d / 4)
			pid := c.Pid(killed)
			began := time.Now()
			if err := c.Kill(killed); err != nil {
				t.Errorf("kill node %d: %v", killed, err)
				return
			}
			if err := c.Restart(killed); err != nil {
				t.Errorf("restart node %d: %v", killed, err)
				return
			}
			restarted = true
			logf("node %d (pid %d) killed with SIGKILL; pid %d ready (wsrep_ready=ON) %v later",
				killed, pid, c.Pid(killed), time.Since(began).Round(time.Millisecond))
		},
	})
	rep.Log(t.Logf, 50)
	if !restarted {
		t.Errorf("node %d was not killed and restarted", killed)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations of exactly-once on Galera", len(rep.Violations))
	}
}
