// Package vitess holds the tests of sqlonce on a sharded Vitess keyspace:
// vttestserver (tests/internal/vitess) with two shards, the MySQL driver
// talking to vtgate, sqlonce's tables sharded with the rows they guard by
// the vschema docs/deployments.md gives. docs/deployments.md cites them.
package vitess

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

func TestMain(m *testing.M) {
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	vitess.StopShared()
	os.Exit(code)
}

// single keeps every transaction of a session on one shard.
const single = vitess.Single

// vschema is the keyspace's VSchema as docs/deployments.md gives it:
// sqlonce's tables as tests/internal/vitess has them, the business table
// by its tenant with the same vindex, so that a key whose scope is the
// tenant's id lands on the shard of that tenant's rows.
var vschema = append(append([]string(nil), vitess.VSchema...),
	"ALTER VSCHEMA ON orders ADD VINDEX xxhash(tenant_id) USING xxhash",
)

// orders is the business table of the tests: a tenant's orders, on the
// tenant's shard.
const ordersDDL = `CREATE TABLE orders (
    tenant_id BIGINT NOT NULL,
    order_id  VARBINARY(64) NOT NULL,
    amount    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, order_id)
) ENGINE = InnoDB`

var schema struct {
	once sync.Once
	err  error
}

// setup starts the shared cluster and creates the schema once; it returns
// a pool on vtgate in transaction_mode single.
func setup(t *testing.T) (*vitess.Cluster, *sql.DB) {
	t.Helper()
	c := vitess.Shared(t)
	schema.once.Do(func() { schema.err = createSchema(c) })
	if schema.err != nil {
		t.Fatalf("schema through vtgate: %v", schema.err)
	}
	return c, open(t, c.DSN(vitess.Keyspace, single))
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	t.Cleanup(func() { db.Close() })
	return db
}

// createSchema applies the vschema, then sqlonce's migrations and the
// business table, through vtgate.
func createSchema(c *vitess.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", c.DSN(vitess.Keyspace))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range vschema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		return fmt.Errorf("migrations.Up: %w", err)
	}
	if _, err := db.ExecContext(ctx, ordersDDL); err != nil {
		return err
	}
	// vtgate learns a new table's columns from the tablets' schema
	// tracking a moment later; until then an INSERT without a column
	// list fails (VT09004). sqlonce's statements name their columns, but
	// wait for the tables to be known anyway.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n)
		if err == nil {
			if err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlonce_keys").Scan(&n); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shardCounts counts rows of a table on each shard, by targeting the
// shard (keyspace:shard) with the statement.
func shardCounts(t *testing.T, c *vitess.Cluster, query string, args ...any) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, shard := range []string{"-80", "80-"} {
		db := open(t, c.DSN(vitess.Keyspace+":"+shard))
		var n int
		if err := db.QueryRow(query, args...).Scan(&n); err != nil {
			t.Fatalf("shard %s: %s: %v", shard, query, err)
		}
		out[shard] = n
		db.Close()
	}
	return out
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func hasAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
