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
	"ALTER VSCHEMA ON accounts ADD VINDEX xxhash(tenant_id) USING xxhash",
	// notes follow httpidem's keys: sharded by a column holding the
	// key's scope ("k:" and the principal) with the keys' vindex.
	"ALTER VSCHEMA ON notes ADD VINDEX xxhash(scope) USING xxhash",
)

// orders is the business table of the tests: a tenant's orders, on the
// tenant's shard.
const ordersDDL = `CREATE TABLE orders (
    tenant_id BIGINT NOT NULL,
    order_id  VARBINARY(64) NOT NULL,
    amount    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, order_id)
) ENGINE = InnoDB`

// accounts is the business table of the optimistic and statemachine
// tests: a tenant's accounts, with a version and a state, on the
// tenant's shard.
const accountsDDL = `CREATE TABLE accounts (
    tenant_id  BIGINT NOT NULL,
    account_id VARBINARY(64) NOT NULL,
    status     VARBINARY(16) NOT NULL,
    version    BIGINT NOT NULL,
    balance    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, account_id)
) ENGINE = InnoDB`

// notes is the business table of the httpidem test: a tenant's notes,
// sharded by the text of the scope httpidem gives the tenant's keys, so
// that they live on the shard of those keys.
const notesDDL = `CREATE TABLE notes (
    scope   VARBINARY(255) NOT NULL,
    note_id VARBINARY(255) NOT NULL,
    body    VARBINARY(255) NOT NULL,
    PRIMARY KEY (scope, note_id)
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
	for _, ddl := range []string{ordersDDL, accountsDDL, notesDDL} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	// vtgate learns a new table's columns from the tablets' schema
	// tracking a moment later; until then an INSERT without a column
	// list fails (VT09004). sqlonce's statements name their columns, but
	// wait for the tables to be known anyway.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		var err error
		// The last query names a column a later migration added: vtgate
		// knows the table's first columns a moment before its last ones
		// (1054 "column 'namespace' not found" when a test ran alone).
		for _, q := range []string{"SELECT COUNT(*) FROM orders", "SELECT COUNT(*) FROM accounts", "SELECT COUNT(*) FROM notes", "SELECT COUNT(namespace) FROM sqlonce_keys"} {
			if err = db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				break
			}
		}
		if err == nil {
			return nil
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

// shardOf returns the shard vtgate routes a value of the xxhash vindex
// to (a vindex reads as a table of the shard each value maps to).
func shardOf(t *testing.T, db *sql.DB, v any) string {
	t.Helper()
	var ksid []byte
	var s string
	if err := db.QueryRow("SELECT keyspace_id, shard FROM xxhash WHERE id = ?", v).Scan(&ksid, &s); err != nil {
		t.Fatalf("vindex lookup of %v: %v", v, err)
	}
	return s
}
