package failover

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/haproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestHAProxyGalera: a three-node Galera cluster behind HAProxy with one
// writer (node 1) and the other nodes as backups, the clients connected
// through HAProxy only. Node 1 is killed with SIGKILL under load;
// HAProxy marks it down (port checks every 0.5 s, two failures) and sends
// new connections to node 2, which holds every transaction node 1
// committed (Galera replicates a write set to the cluster before the
// commit returns). On node 2: no key with two effects, none without its
// effect, no effect without its key, and no answered key lost.
func TestHAProxyGalera(t *testing.T) {
	testdb.Long(t)
	c, err := galera.Start(3)
	need(t, "Galera cluster (galera-4, rsync)", err)
	t.Cleanup(c.Stop)
	t.Logf("galera: 3 nodes ready in %v", c.Started.Round(100*time.Millisecond))
	var nodePorts []int
	for _, nd := range c.Nodes {
		nodePorts = append(nodePorts, nd.Port)
	}
	proxy, err := haproxy.Start(nodePorts)
	need(t, "HAProxy", err)
	t.Cleanup(proxy.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := sql.Open("mysql", c.DSN(2, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	mustExec(t, root, "CREATE DATABASE app")
	// Node 1, the clients' writer, applies the DDL after node 2 has
	// answered: a client connecting to app there at once was refused
	// (1049 unknown database). A read with wsrep_sync_wait=1 on node 1
	// waits until it has applied what the cluster committed before it.
	node1, err := sql.Open("mysql", c.DSN(1, "", "wsrep_sync_wait=1"))
	if err != nil {
		t.Fatal(err)
	}
	var schemas int
	err = node1.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'app'").Scan(&schemas)
	node1.Close()
	if err != nil || schemas != 1 {
		t.Fatalf("app on node 1 after its creation on node 2: %d schemas, %v", schemas, err)
	}
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/app?parseTime=true&timeout=10s&%s",
		proxy.Port, strings.Join(galera.Params, "&")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(workers + 2)
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	mustExec(t, db, "CREATE TABLE ledger (id BIGINT AUTO_INCREMENT PRIMARY KEY, scope VARBINARY(255) NOT NULL, k VARBINARY(255) NOT NULL, n BIGINT NOT NULL DEFAULT 1)")
	// The clients' writer is node 1.
	var port int
	if err := db.QueryRowContext(ctx, "SELECT @@port").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if port != c.Nodes[0].Port {
		t.Fatalf("HAProxy sent the client to port %d, not to node 1 (%d)", port, c.Nodes[0].Port)
	}
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	counts := runFailover(t, ctx, mysqlCall(ctx, db, store), func() error { return c.Kill(1) }, func() {
		// HAProxy moves the clients to node 2 by itself.
		waitFor(t, "HAProxy sending connections to node 2", func(ctx context.Context) (bool, error) {
			var p int
			err := db.QueryRowContext(ctx, "SELECT @@port").Scan(&p)
			return p == c.Nodes[1].Port, err
		})
	}, mysqlCount(root), mysqlLedgerKeys(root, "app.ledger"), "app.")
	if counts.AckedLost != 0 || counts.RunAgain != 0 {
		t.Errorf("Galera behind HAProxy: %d keys answered on node 1 were lost, %d run again on node 2", counts.AckedLost, counts.RunAgain)
	}
	t.Logf("HAProxy + Galera: %d keys answered, none lost; clients back %v after the kill", counts.Acked, counts.Downtime.Round(time.Millisecond))
}
