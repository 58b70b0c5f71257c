package harness

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// Vitess is the Factory for MySQL through Vitess's vtgate, on the sharded
// keyspace of c, in transaction_mode=single, with sqlonce's tables made
// through vtgate by vitess.VSchema and migrations.Up.
//
// A case cannot have a keyspace of its own (vttestserver serves the
// keyspaces it was started with), and sqlonce's table names are fixed, so
// the cases take turns: each DB is one shard of the keyspace, its tables
// emptied when the DB is made, and the Factory hands a shard to one DB at
// a time (a case that makes a second DB while it holds the first gets the
// other shard; one that wants a third is skipped). Each DB's session is
// pinned to its shard (the DSN's database is keyspace:shard): the
// suite's business tables (orders, ledger, shipments) have no column that
// could follow a case's scopes to their shard, so the keys and the rows of
// a case are put on one shard by pinning, as a tenant's are by its vindex
// (tests/vitess). Every statement still goes through vtgate: its session,
// transaction mode, error wrapping and SET handling, and the driver
// recognises vtgate as it does on the keyspace.
//
// Kill kills the tablet's connection in the mysqld behind the tablets
// (vtgate runs no KILL).
//
// vtgate cannot run SET TRANSACTION ISOLATION LEVEL on a MariaDB backend
// (1193, transaction_isolation): Begin takes a transaction at another
// level than the default from a pool of its own whose sessions set
// tx_isolation, which vtgate passes on.
//
// skip, when set, is called with each case's t before its DB is made:
// the configuration's list of what cannot hold through vtgate.
func Vitess(c *vitess.Cluster, skip func(t testing.TB)) Factory[*sql.Tx] {
	return func(t testing.TB, maxConns int) DB[*sql.Tx] {
		t.Helper()
		if skip != nil {
			skip(t)
		}
		if err := vtSetup(&vtSchema, c, vitess.VSchema, vtShardTables(c)); err != nil {
			t.Fatalf("schema through vtgate: %v", err)
		}
		shard := vtTake(t)
		if maxConns <= 0 {
			maxConns = 8
		}
		// interpolateParams: through a session pinned to a shard vtgate
		// cannot prepare a statement with LIMIT ? (it runs it at PREPARE
		// with NULL arguments: 1064 near 'null'), such as the steps'
		// resumer's; sent as text, it works.
		dsn := c.DSN(vitess.Keyspace+":"+shard, vitess.Single, "parseTime=true", "interpolateParams=true")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vtEmpty(ctx, dsn, vtTables...); err != nil {
			t.Fatalf("empty the tables of shard %s: %v", shard, err)
		}
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { db.Close() })
		return &myDB{
			db:     &testdb.MySQL{DB: db, Name: vitess.Keyspace + ":" + shard, DSN: dsn},
			driver: testdrv.MySQL(t, db),
			levels: newLevelPools(t, dsn, maxConns),
			kill:   func(ctx context.Context, id int64) error { return vtKill(ctx, c, id) },
		}
	}
}

// vtKill kills connection id of the mysqld behind the tablets: vtgate
// runs no KILL unless started with --allow-kill-statement (vttestserver
// does not pass it), and a session pinned to a shard reads, as
// CONNECTION_ID(), the id of the tablet's connection that runs its
// transaction. Killed, the tablet's connection is gone with the
// transaction, and vtgate answers the session's next statement with the
// tablet's error; the session itself lives on.
func vtKill(ctx context.Context, c *vitess.Cluster, id int64) error {
	dsn, err := c.MySQLDSN()
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "KILL ?", id)
	return err
}

// vtShards: which shards a live DB holds.
var vtShards struct {
	mu   sync.Mutex
	held map[string]bool
	next int
}

// vtTake hands t a shard no live DB holds, released when t ends.
func vtTake(t testing.TB) string {
	t.Helper()
	vtShards.mu.Lock()
	defer vtShards.mu.Unlock()
	if vtShards.held == nil {
		vtShards.held = map[string]bool{}
	}
	for range vitess.Shards {
		s := vitess.Shards[vtShards.next%len(vitess.Shards)]
		vtShards.next++
		if vtShards.held[s] {
			continue
		}
		vtShards.held[s] = true
		t.Cleanup(func() {
			vtShards.mu.Lock()
			delete(vtShards.held, s)
			vtShards.mu.Unlock()
		})
		return s
	}
	t.Skipf("through vtgate: the case wants more databases at once than the keyspace has shards (%d)", len(vitess.Shards))
	return ""
}

// vtOnce is a schema made once per process.
type vtOnce struct {
	once sync.Once
	err  error
}

// vtSchema is Vitess's schema: vitess.VSchema, the business tables on
// each shard.
var vtSchema vtOnce

// vtSetup makes a schema through vtgate on the keyspace of c, once per
// process for each s: it applies vschema's statements and sqlonce's
// migrations, then tables, given the handle on the keyspace, makes the
// business tables.
func vtSetup(s *vtOnce, c *vitess.Cluster, vschema []string, tables func(ctx context.Context, db *sql.DB) error) error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.err = func() error {
			db, err := sql.Open("mysql", c.DSN(vitess.Keyspace))
			if err != nil {
				return err
			}
			defer db.Close()
			for _, stmt := range vschema {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", stmt, err)
				}
			}
			if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
				return fmt.Errorf("migrations.Up: %w", err)
			}
			return tables(ctx, db)
		}()
	})
	return s.err
}

// vtShardTables makes the suite's business tables (bizdb) on each shard
// of c's keyspace, in a session pinned to it: they have no column to
// shard them by.
func vtShardTables(c *vitess.Cluster) func(ctx context.Context, _ *sql.DB) error {
	return func(ctx context.Context, _ *sql.DB) error {
		for _, shard := range vitess.Shards {
			sdb, err := sql.Open("mysql", c.DSN(vitess.Keyspace+":"+shard))
			if err != nil {
				return err
			}
			err = bizdb.Migrate(ctx, sdb, "mysql")
			sdb.Close()
			if err != nil {
				return fmt.Errorf("shard %s: %w", shard, err)
			}
		}
		return nil
	}
}

// vtTables are the tables a case writes, children first.
var vtTables = []string{"shipments", "orders", "ledger", "sqlonce_keys", "sqlonce_tokens"}

// vtEmpty deletes every row of tables on the shard or keyspace of dsn,
// in order.
func vtEmpty(ctx context.Context, dsn string, tables ...string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, table := range tables {
		if _, err := db.ExecContext(ctx, "DELETE FROM "+table); err != nil {
			return fmt.Errorf("%s: %w", table, err)
		}
	}
	return nil
}

// levelPools are a vtgate DB's pools per isolation level, opened on first
// use: each session sets tx_isolation (MariaDB's name, which vtgate
// passes on to the tablet's connection) instead of the SET TRANSACTION
// that database/sql's BeginTx sends for a level.
type levelPools struct {
	t        testing.TB
	dsn      string
	maxConns int
	mu       sync.Mutex
	pools    map[Isolation]*sql.DB
}

func newLevelPools(t testing.TB, dsn string, maxConns int) *levelPools {
	l := &levelPools{t: t, dsn: dsn, maxConns: maxConns, pools: map[Isolation]*sql.DB{}}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, p := range l.pools {
			p.Close()
		}
	})
	return l
}

func (l *levelPools) pool(iso Isolation) (*sql.DB, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pools[iso]; ok {
		return p, nil
	}
	cfg, err := mysql.ParseDSN(l.dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'" + strings.ReplaceAll(string(iso), " ", "-") + "'"
	p, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	p.SetMaxOpenConns(l.maxConns)
	p.SetMaxIdleConns(l.maxConns)
	l.pools[iso] = p
	return p, nil
}
