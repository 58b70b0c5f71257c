// Package testdb provides each test with a database of its own.
//
// The server is found in this order:
//  1. SQLONCE_POSTGRES_DSN / SQLONCE_MYSQL_DSN, if set;
//  2. the local services (PostgreSQL on 127.0.0.1:5432, MariaDB on
//     127.0.0.1:3306, as machine setups in this project provide them);
//  3. a throwaway container through testcontainers-go, when a Docker
//     engine answers.
//
// When none answers, a test is skipped with a message naming the variable
// to set, except under CI=true, where it fails: in CI an unreachable
// database is a failure, never a silent skip.
//
// Each test gets a fresh PostgreSQL schema or MySQL database with sqlonce's
// migrations and the business tables applied, dropped when the test ends.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/testcontainers/testcontainers-go"
	tcmariadb "github.com/testcontainers/testcontainers-go/modules/mariadb"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
)

const (
	PostgresEnv = "SQLONCE_POSTGRES_DSN"
	MySQLEnv    = "SQLONCE_MYSQL_DSN"

	localPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	localMySQL    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
)

// InCI reports whether the run is under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Long skips t under -short (make test-short, the inner loop): for a
// configuration that differs from one -short keeps only in a library or
// a setting (pgx's database/sql adapter, lib/pq, mattn's SQLite), one that
// puts a proxy in front of a kept server (the PgBouncer configurations),
// a topology of several servers (the Galera cluster, replicas and their
// failovers, HAProxy, pg_auto_failover: each takes a minute of both
// cores to start and run), or a run that repeats a shorter one at
// length. make test runs it.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: make test runs it")
	}
}

type server struct {
	once sync.Once
	dsn  string
	why  string // set when no server was found
}

var pgServer, myServer server

func (s *server) resolve(env, local string, ping func(string) error, container func() (string, error)) (string, string) {
	s.once.Do(func() {
		if dsn := os.Getenv(env); dsn != "" {
			if err := ping(dsn); err != nil {
				s.why = fmt.Sprintf("%s is set but does not answer: %v", env, err)
				return
			}
			s.dsn = dsn
			return
		}
		localErr := ping(local)
		if localErr == nil {
			s.dsn = local
			return
		}
		dsn, err := container()
		if err == nil {
			if err = ping(dsn); err == nil {
				s.dsn = dsn
				return
			}
		}
		s.why = fmt.Sprintf("no server: set %s (local %s: %v; testcontainers: %v)", env, local, localErr, err)
	})
	return s.dsn, s.why
}

func need(t testing.TB, dsn, why string) {
	t.Helper()
	if dsn != "" {
		return
	}
	if InCI() {
		t.Fatalf("CI=true and the database is unreachable: %s", why)
	}
	t.Skip(why)
}

func pingPostgres(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func pingMySQL(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// dockerUp reports whether a Docker engine answers, without the panics
// testcontainers raises when none does.
func dockerUp() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no Docker engine: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("no Docker engine: %w", err)
	}
	return nil
}

func postgresContainer() (string, error) {
	if err := dockerUp(); err != nil {
		return "", err
	}
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("test"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func mysqlContainer() (string, error) {
	if err := dockerUp(); err != nil {
		return "", err
	}
	ctx := context.Background()
	c, err := tcmariadb.Run(ctx, "mariadb:10.11", tcmariadb.WithDatabase("test"), tcmariadb.WithUsername("root"), tcmariadb.WithPassword(""))
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "parseTime=true")
}

// PostgresDSN returns the server DSN, or skips/fails t as described above.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn, why := pgServer.resolve(PostgresEnv, localPostgres, pingPostgres, postgresContainer)
	need(t, dsn, why)
	return dsn
}

// MySQLDSN returns the server DSN, or skips/fails t as described above.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn, why := myServer.resolve(MySQLEnv, localMySQL, pingMySQL, mysqlContainer)
	need(t, dsn, why)
	return dsn
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Postgres is an isolated PostgreSQL schema with the tables migrated.
type Postgres struct {
	Pool   *pgxpool.Pool
	Schema string
	// DSN connects to the schema (search_path set).
	DSN string
}

// EmptyPostgres creates an empty schema for t, dropped when t ends, and
// returns its name and a DSN whose search_path is that schema.
func EmptyPostgres(t testing.TB) (schema, dsn string) {
	t.Helper()
	schema, dsn, drop := emptyPostgres(t)
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return schema, dsn
}

// emptyPostgres is EmptyPostgres without the cleanup: drop drops the
// schema.
func emptyPostgres(t testing.TB) (schema, dsn string, drop func() error) {
	t.Helper()
	server := PostgresDSN(t)
	ctx := context.Background()
	schema = uniqueName("t_")
	admin, err := postgresAdmin(server)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	drop = func() error {
		_, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		return err
	}
	sep := "?"
	if strings.Contains(server, "?") {
		sep = "&"
	}
	return schema, server + sep + "search_path=" + schema, drop
}

// PostgresAdmin returns the test process's admin pool on the server of
// t's PostgreSQL (see admins): for statements on a schema from outside
// its cases' pools, schema-qualified. Never close it.
func PostgresAdmin(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := postgresAdmin(PostgresDSN(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return p
}

// PostgresMaxConnections returns the server's max_connections, read once
// per server: the harness keeps more idle connections between cases where
// the server has room for them (.ci/run sets 1000).
func PostgresMaxConnections(t testing.TB) int {
	t.Helper()
	server := PostgresDSN(t)
	maxConns.Lock()
	defer maxConns.Unlock()
	if n, ok := maxConns.pg[server]; ok {
		return n
	}
	p, err := postgresAdmin(server)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	var n int
	if err := p.QueryRow(context.Background(), "SELECT current_setting('max_connections')::int").Scan(&n); err != nil {
		t.Fatalf("max_connections: %v", err)
	}
	if maxConns.pg == nil {
		maxConns.pg = map[string]int{}
	}
	maxConns.pg[server] = n
	return n
}

var maxConns struct {
	sync.Mutex
	pg map[string]int
}

// Admin handles, one per server for the whole test process: creating and
// dropping a case's schema or database on a connection of its own cost
// two connections per case, and a PostgreSQL connection costs ~40 ms of
// CPU on a virtual machine (a backend forked, its caches built, torn
// down), as much as ~350 queries: thousands of cases paid minutes of CPU
// for them. The handles are never closed: the process's end closes them.
var admins struct {
	sync.Mutex
	pg map[string]*pgxpool.Pool
	my map[string]*sql.DB
}

// adminConns bounds each admin handle: the configurations that run side
// by side create and drop schemas a statement at a time.
const adminConns = 4

func postgresAdmin(server string) (*pgxpool.Pool, error) {
	admins.Lock()
	defer admins.Unlock()
	if p, ok := admins.pg[server]; ok {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(server)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = adminConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	if admins.pg == nil {
		admins.pg = map[string]*pgxpool.Pool{}
	}
	admins.pg[server] = p
	return p, nil
}

func mysqlAdmin(server string) (*sql.DB, error) {
	admins.Lock()
	defer admins.Unlock()
	if db, ok := admins.my[server]; ok {
		return db, nil
	}
	db, err := sql.Open("mysql", server)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(adminConns)
	db.SetMaxIdleConns(adminConns)
	if admins.my == nil {
		admins.my = map[string]*sql.DB{}
	}
	admins.my[server] = db
	return db, nil
}

// NewPostgres creates a schema for t, migrates it, and drops it when t
// ends. maxConns bounds the pool (0: 8).
func NewPostgres(t testing.TB, maxConns int32) *Postgres {
	t.Helper()
	p, drop := KeptPostgres(t, maxConns)
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	return p
}

// KeptPostgres is NewPostgres for a schema that outlives t (the harness
// keeps migrated schemas for the next case): drop closes the pool and
// drops the schema.
func KeptPostgres(t testing.TB, maxConns int32) (p *Postgres, drop func() error) {
	t.Helper()
	schema, dsn, dropSchema := emptyPostgres(t)
	ok := false
	defer func() {
		if !ok {
			_ = dropSchema()
		}
	}()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	defer func() {
		if !ok {
			pool.Close()
		}
	}()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	// The handle's bound is the pool's: with one connection, migrations
	// must not hold their lock in a transaction on it (NewProvider picks
	// the session lock then), or they wait forever for a second one.
	db.SetMaxOpenConns(int(maxConns))
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		t.Fatalf("sqlonce migrations: %v", err)
	}
	if err := bizdb.Migrate(ctx, db, "postgres"); err != nil {
		t.Fatal(err)
	}
	ok = true
	return &Postgres{Pool: pool, Schema: schema, DSN: dsn}, func() error {
		pool.Close()
		return dropSchema()
	}
}

// MySQL is an isolated MySQL/MariaDB database with the tables migrated.
type MySQL struct {
	DB   *sql.DB
	Name string
	// DSN connects to the database.
	DSN string
}

// EmptyMySQL creates an empty database for t, dropped when t ends, and
// returns its name and DSN (parseTime=true).
func EmptyMySQL(t testing.TB) (name, dsn string) {
	t.Helper()
	return EmptyMySQLOn(t, MySQLDSN(t))
}

// EmptyMySQLOn is EmptyMySQL on the server of DSN server (a node of a
// cluster); the DSN returned keeps server's parameters.
func EmptyMySQLOn(t testing.TB, server string) (name, dsn string) {
	t.Helper()
	ctx := context.Background()
	name = uniqueName("t_")
	admin, err := mysqlAdmin(server)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	return name, cfg.FormatDSN()
}

// NewMySQL creates a database for t, migrates it, and drops it when t ends.
// maxConns bounds the pool (0: 8).
func NewMySQL(t testing.TB, maxConns int) *MySQL {
	t.Helper()
	return NewMySQLOn(t, MySQLDSN(t), maxConns)
}

// NewMySQLOn is NewMySQL on the server of DSN server (a node of a
// cluster); the database's DSN keeps server's parameters. Its tables are
// made from a template migrated once per server (mysqlTemplate).
func NewMySQLOn(t testing.TB, server string, maxConns int) *MySQL {
	t.Helper()
	name, dsn := EmptyMySQLOn(t, server)
	ctx := context.Background()
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
	tm, err := mysqlTemplateOf(ctx, server)
	if err != nil {
		t.Fatalf("mysql template: %v", err)
	}
	if err := tm.create(ctx, db); err != nil {
		t.Fatalf("tables from the template: %v", err)
	}
	return &MySQL{DB: db, Name: name, DSN: dsn}
}
