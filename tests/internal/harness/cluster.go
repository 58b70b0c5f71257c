package harness

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// MySQLNodes is the Factory of MySQL for a cluster whose nodes all take
// writes (MariaDB Galera): one database, created and migrated through the
// first of servers, seen through a pool of maxConns connections on every
// node, each with a driver of its own. servers are DSNs of the nodes
// without a database name; their parameters (wsrep_sync_wait=1) apply to
// every pool. A node's view answers once the tables have reached it.
func MySQLNodes(t testing.TB, maxConns int, servers ...string) []DB[*sql.Tx] {
	t.Helper()
	first := testdb.NewMySQLOn(t, servers[0], maxConns)
	out := []DB[*sql.Tx]{&myDB{db: first, driver: testdrv.MySQL(t, first.DB)}}
	for _, server := range servers[1:] {
		cfg, err := mysql.ParseDSN(server)
		if err != nil {
			t.Fatalf("parse dsn: %v", err)
		}
		cfg.DBName = first.Name
		cfg.ParseTime = true
		dsn := cfg.FormatDSN()
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if maxConns <= 0 {
			maxConns = 8
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { db.Close() })
		// DDL reaches the other nodes in the cluster's order, not
		// necessarily before the first node answers.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for {
			var n int64
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlonce_keys").Scan(&n)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				cancel()
				t.Fatalf("the tables did not reach %s: %v", cfg.Addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		out = append(out, &myDB{db: &testdb.MySQL{DB: db, Name: first.Name, DSN: dsn}, driver: testdrv.MySQL(t, db)})
	}
	return out
}
