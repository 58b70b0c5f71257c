package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/mysqlbiz"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/pgbiz"
)

// The servers, found as the tests find them: the environment variable if
// set, else the local services.
const (
	PostgresEnv = "SQLONCE_POSTGRES_DSN"
	MySQLEnv    = "SQLONCE_MYSQL_DSN"

	LocalPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	LocalMySQL    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
)

// backend is one freshly created PostgreSQL schema or MariaDB database
// holding sqlonce's table and the example business tables, dropped by
// close. It gives the benchmark the few operations it needs, the
// business ones through the sqlc-generated queries the tests use.
type backend[TTx any] interface {
	// name is "postgres" or "mysql".
	name() string
	driver() sqlonce.Driver[TTx]
	begin(ctx context.Context) (TTx, error)
	commit(ctx context.Context, tx TTx) error
	rollback(ctx context.Context, tx TTx) error
	biz(tx TTx) biz
	// kill ends tx the way a dead process does: its connection is killed
	// from another session (pg_terminate_backend, KILL) and the server
	// rolls back. tx is left to whoever began it, to release its handle;
	// no other code of the "dead" caller runs afterwards.
	kill(ctx context.Context, tx TTx)
	// bareUpdate adds delta to an order's amount with no guard at all.
	bareUpdate(ctx context.Context, tx TTx, id, delta int64) error
	// createOrders inserts n orders with codes prefix-0..prefix-(n-1) and
	// returns their ids in that order.
	createOrders(ctx context.Context, prefix string, n int) ([]int64, error)
	// ledgerRows counts ledger rows per ref, for refs starting with prefix.
	ledgerRows(ctx context.Context, prefix string) (map[string]int64, error)
	// orderCodes counts orders per code, for codes starting with prefix.
	orderCodes(ctx context.Context, prefix string) (map[string]int64, error)
	// orders reads amount and status of the given orders.
	orders(ctx context.Context, ids []int64) (map[int64]orderRow, error)
	// server describes the server: version and durability settings.
	server(ctx context.Context) (Server, error)
	// workStart starts measuring what the server writes; nil when the
	// server cannot tell (see Work).
	workStart(ctx context.Context) (meter, error)
	close()
}

type orderRow struct {
	amount int64
	status string
}

// biz is the business queries bound to one transaction.
type biz interface {
	ledgerInsert(ctx context.Context, ref string, amount int64) error
	ledgerExists(ctx context.Context, ref string) (bool, error)
	orderInsert(ctx context.Context, code string, amount int64) error
	// orderInsertIfAbsent is INSERT ... ON CONFLICT (code) DO NOTHING,
	// returning the rows it inserted (PostgreSQL only). customer is the
	// order's, apart from its code: see the unique-inserted technique.
	orderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error)
	orderAddAmount(ctx context.Context, id, version, delta int64) (int64, error)
	orderGetVersion(ctx context.Context, id int64) (int64, error)
	orderSetStatus(ctx context.Context, id int64, from, to string) (int64, error)
	orderGetStatus(ctx context.Context, id int64) (string, error)
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

const setupTimeout = 30 * time.Second

// --- PostgreSQL ---

type pgBackend struct {
	pool     *pgxpool.Pool
	drv      *pgxdriver.Driver
	adminDSN string // the server, for the drop
	schema   string
	// walinspect is the schema holding pg_walinspect; "" when the server
	// does not offer it.
	walinspect string
}

func openPostgres(ctx context.Context, server string, maxConns int) (*pgBackend, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect (set %s): %w", PostgresEnv, err)
	}
	defer admin.Close(ctx)
	schema := uniqueName("bench_")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	b := &pgBackend{adminDSN: server, schema: schema}
	fail := func(err error) (*pgBackend, error) {
		b.close()
		return nil, err
	}
	sep := "?"
	if strings.Contains(server, "?") {
		sep = "&"
	}
	cfg, err := pgxpool.ParseConfig(server + sep + "search_path=" + schema)
	if err != nil {
		return fail(err)
	}
	cfg.MaxConns = int32(maxConns)
	if b.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fail(err)
	}
	db := stdlib.OpenDBFromPool(b.pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		return fail(fmt.Errorf("postgres: sqlonce migrations: %w", err))
	}
	if err := bizdb.Migrate(ctx, db, "postgres"); err != nil {
		return fail(fmt.Errorf("postgres: %w", err))
	}
	// Without pg_walinspect (not installed, not a superuser) the run
	// goes on without the work columns.
	_ = b.enableWork(ctx)
	if b.drv, err = pgxdriver.New(b.pool); err != nil {
		return fail(err)
	}
	return b, nil
}

func (b *pgBackend) name() string                   { return "postgres" }
func (b *pgBackend) driver() sqlonce.Driver[pgx.Tx] { return b.drv }
func (b *pgBackend) begin(ctx context.Context) (pgx.Tx, error) {
	return b.pool.Begin(ctx)
}
func (b *pgBackend) commit(ctx context.Context, tx pgx.Tx) error   { return tx.Commit(ctx) }
func (b *pgBackend) rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }
func (b *pgBackend) biz(tx pgx.Tx) biz                             { return pgBiz{pgbiz.New(tx)} }

func (b *pgBackend) kill(ctx context.Context, tx pgx.Tx) {
	var pid int64
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err == nil {
		_, _ = b.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
	}
}

func (b *pgBackend) bareUpdate(ctx context.Context, tx pgx.Tx, id, delta int64) error {
	_, err := tx.Exec(ctx, "UPDATE orders SET amount = amount + $1 WHERE id = $2", delta, id)
	return err
}

func (b *pgBackend) createOrders(ctx context.Context, prefix string, n int) ([]int64, error) {
	rows, err := b.pool.Query(ctx, `
		INSERT INTO orders (code, customer, amount)
		SELECT $1::text || i, $1::text || i, 0 FROM generate_series(0, $2::int - 1) AS i
		ORDER BY i
		RETURNING id, code`, prefix+"-", n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectOrderIDs(prefix, n, rows)
}

// resultRows is what pgx.Rows and *sql.Rows share; the caller closes them.
type resultRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// collectOrderIDs reads (id, code) rows of the orders createOrders made
// and returns their ids in code order.
func collectOrderIDs(prefix string, n int, rows resultRows) ([]int64, error) {
	ids := make([]int64, n)
	seen := 0
	for rows.Next() {
		var id int64
		var code string
		if err := rows.Scan(&id, &code); err != nil {
			return ids, err
		}
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(code, prefix+"-"), "%d", &i); err != nil || i < 0 || i >= n {
			return ids, fmt.Errorf("unexpected order code %q", code)
		}
		ids[i] = id
		seen++
	}
	err := rows.Err()
	if err == nil && seen != n {
		err = fmt.Errorf("created %d orders, want %d", seen, n)
	}
	return ids, err
}

func (b *pgBackend) ledgerRows(ctx context.Context, prefix string) (map[string]int64, error) {
	rows, err := b.pool.Query(ctx, "SELECT ref, count(*) FROM ledger WHERE starts_with(ref, $1) GROUP BY ref", prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectCounts(rows)
}

func (b *pgBackend) orderCodes(ctx context.Context, prefix string) (map[string]int64, error) {
	rows, err := b.pool.Query(ctx, "SELECT code, count(*) FROM orders WHERE starts_with(code, $1) GROUP BY code", prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectCounts(rows)
}

// collectCounts reads (key, count) rows.
func collectCounts(rows resultRows) (map[string]int64, error) {
	m := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}

func (b *pgBackend) orders(ctx context.Context, ids []int64) (map[int64]orderRow, error) {
	rows, err := b.pool.Query(ctx, "SELECT id, amount, status FROM orders WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectOrders(rows)
}

// collectOrders reads (id, amount, status) rows.
func collectOrders(rows resultRows) (map[int64]orderRow, error) {
	m := map[int64]orderRow{}
	for rows.Next() {
		var id int64
		var r orderRow
		if err := rows.Scan(&id, &r.amount, &r.status); err != nil {
			return nil, err
		}
		m[id] = r
	}
	return m, rows.Err()
}

func (b *pgBackend) server(ctx context.Context) (Server, error) {
	s := Server{Name: "PostgreSQL", Settings: map[string]string{}}
	if err := b.pool.QueryRow(ctx, "SHOW server_version").Scan(&s.Version); err != nil {
		return s, err
	}
	for _, name := range []string{"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "default_transaction_isolation", "shared_buffers", "max_connections"} {
		var v string
		if err := b.pool.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			return s, err
		}
		s.Settings[name] = v
	}
	return s, nil
}

func (b *pgBackend) close() {
	if b.pool != nil {
		b.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, b.adminDSN)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, "DROP SCHEMA "+b.schema+" CASCADE")
}

type pgBiz struct{ q *pgbiz.Queries }

func (q pgBiz) ledgerInsert(ctx context.Context, ref string, amount int64) error {
	return q.q.LedgerInsert(ctx, pgbiz.LedgerInsertParams{Ref: ref, Amount: amount})
}
func (q pgBiz) ledgerExists(ctx context.Context, ref string) (bool, error) {
	return q.q.LedgerExistsByRef(ctx, ref)
}
func (q pgBiz) orderInsert(ctx context.Context, code string, amount int64) error {
	_, err := q.q.OrderInsert(ctx, pgbiz.OrderInsertParams{Code: code, Customer: code, Amount: amount})
	return err
}
func (q pgBiz) orderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return q.q.OrderInsertIfAbsent(ctx, pgbiz.OrderInsertIfAbsentParams{Code: code, Customer: customer, Amount: amount})
}
func (q pgBiz) orderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return q.q.OrderAddAmount(ctx, pgbiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}
func (q pgBiz) orderGetVersion(ctx context.Context, id int64) (int64, error) {
	return q.q.OrderGetVersion(ctx, id)
}
func (q pgBiz) orderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return q.q.OrderSetStatus(ctx, pgbiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}
func (q pgBiz) orderGetStatus(ctx context.Context, id int64) (string, error) {
	return q.q.OrderGetStatus(ctx, id)
}

// --- MySQL / MariaDB ---

type myBackend struct {
	db       *sql.DB
	drv      *mysqldriver.Driver
	adminDSN string
	dbName   string
	// work: table statistics are on; userstatSet: this run turned them on.
	work, userstatSet bool
}

func openMySQL(ctx context.Context, server string, maxConns int) (*myBackend, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		return nil, fmt.Errorf("mysql: parse DSN: %w", err)
	}
	admin, err := sql.Open("mysql", server)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	name := uniqueName("bench_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("mysql: create database (set %s): %w", MySQLEnv, err)
	}
	b := &myBackend{adminDSN: server, dbName: name}
	fail := func(err error) (*myBackend, error) {
		b.close()
		return nil, err
	}
	cfg.DBName = name
	cfg.ParseTime = true
	if b.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return fail(err)
	}
	b.db.SetMaxOpenConns(maxConns)
	b.db.SetMaxIdleConns(maxConns)
	if err := migrations.Up(ctx, b.db, migrations.MySQL); err != nil {
		return fail(fmt.Errorf("mysql: sqlonce migrations: %w", err))
	}
	if err := bizdb.Migrate(ctx, b.db, "mysql"); err != nil {
		return fail(fmt.Errorf("mysql: %w", err))
	}
	// Without the right to set userstat the run goes on without the work
	// columns.
	_ = b.enableWork(ctx)
	if b.drv, err = mysqldriver.New(b.db); err != nil {
		return fail(err)
	}
	return b, nil
}

func (b *myBackend) name() string                    { return "mysql" }
func (b *myBackend) driver() sqlonce.Driver[*sql.Tx] { return b.drv }
func (b *myBackend) begin(ctx context.Context) (*sql.Tx, error) {
	return b.db.BeginTx(ctx, nil)
}
func (b *myBackend) commit(_ context.Context, tx *sql.Tx) error   { return tx.Commit() }
func (b *myBackend) rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }
func (b *myBackend) biz(tx *sql.Tx) biz                           { return myBiz{mysqlbiz.New(tx)} }

func (b *myBackend) kill(ctx context.Context, tx *sql.Tx) {
	var id int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err == nil {
		_, _ = b.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
}

func (b *myBackend) bareUpdate(ctx context.Context, tx *sql.Tx, id, delta int64) error {
	_, err := tx.ExecContext(ctx, "UPDATE orders SET amount = amount + ? WHERE id = ?", delta, id)
	return err
}

func (b *myBackend) createOrders(ctx context.Context, prefix string, n int) ([]int64, error) {
	const batch = 500
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		var q strings.Builder
		q.WriteString("INSERT INTO orders (code, customer, amount) VALUES ")
		args := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			if i > lo {
				q.WriteString(",")
			}
			q.WriteString("(?, ?, 0)")
			code := fmt.Sprintf("%s-%d", prefix, i)
			args = append(args, code, code)
		}
		if _, err := b.db.ExecContext(ctx, q.String(), args...); err != nil {
			return nil, err
		}
	}
	rows, err := b.db.QueryContext(ctx, "SELECT id, code FROM orders WHERE code LIKE CONCAT(?, '%')", prefix+"-")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectOrderIDs(prefix, n, rows)
}

func (b *myBackend) counts(ctx context.Context, query, prefix string) (map[string]int64, error) {
	rows, err := b.db.QueryContext(ctx, query, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectCounts(rows)
}

// Prefixes hold no LIKE wildcards: they are built from digits, letters
// and '-'.
func (b *myBackend) ledgerRows(ctx context.Context, prefix string) (map[string]int64, error) {
	return b.counts(ctx, "SELECT ref, count(*) FROM ledger WHERE ref LIKE CONCAT(?, '%') GROUP BY ref", prefix)
}

func (b *myBackend) orderCodes(ctx context.Context, prefix string) (map[string]int64, error) {
	return b.counts(ctx, "SELECT code, count(*) FROM orders WHERE code LIKE CONCAT(?, '%') GROUP BY code", prefix)
}

func (b *myBackend) orders(ctx context.Context, ids []int64) (map[int64]orderRow, error) {
	m := map[int64]orderRow{}
	if len(ids) == 0 {
		return m, nil
	}
	q := "SELECT id, amount, status FROM orders WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectOrders(rows)
}

func (b *myBackend) server(ctx context.Context) (Server, error) {
	s := Server{Name: "MySQL", Settings: map[string]string{}}
	if err := b.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version); err != nil {
		return s, err
	}
	if strings.Contains(strings.ToLower(s.Version), "mariadb") {
		s.Name = "MariaDB"
	}
	for _, name := range []string{"innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "innodb_doublewrite", "tx_isolation", "innodb_buffer_pool_size", "max_connections"} {
		var v sql.NullString
		err := b.db.QueryRowContext(ctx, "SELECT @@"+name).Scan(&v)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1193 { // unknown variable (tx_isolation on MySQL 8)
			continue
		}
		if err != nil {
			return s, err
		}
		s.Settings[name] = v.String
	}
	return s, nil
}

func (b *myBackend) close() {
	if b.db != nil {
		_ = b.db.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	a, err := sql.Open("mysql", b.adminDSN)
	if err != nil {
		return
	}
	defer a.Close()
	b.disableWork(ctx, a)
	_, _ = a.ExecContext(ctx, "DROP DATABASE "+b.dbName)
}

type myBiz struct{ q *mysqlbiz.Queries }

func (q myBiz) ledgerInsert(ctx context.Context, ref string, amount int64) error {
	return q.q.LedgerInsert(ctx, mysqlbiz.LedgerInsertParams{Ref: ref, Amount: amount})
}
func (q myBiz) ledgerExists(ctx context.Context, ref string) (bool, error) {
	return q.q.LedgerExistsByRef(ctx, ref)
}
func (q myBiz) orderInsert(ctx context.Context, code string, amount int64) error {
	_, err := q.q.OrderInsert(ctx, mysqlbiz.OrderInsertParams{Code: code, Customer: code, Amount: amount})
	return err
}
func (q myBiz) orderInsertIfAbsent(context.Context, string, string, int64) (int64, error) {
	return 0, errors.New("MySQL/MariaDB have no ON CONFLICT (code): unique.Inserted has no statement there")
}
func (q myBiz) orderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return q.q.OrderAddAmount(ctx, mysqlbiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}
func (q myBiz) orderGetVersion(ctx context.Context, id int64) (int64, error) {
	return q.q.OrderGetVersion(ctx, id)
}
func (q myBiz) orderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return q.q.OrderSetStatus(ctx, mysqlbiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}
func (q myBiz) orderGetStatus(ctx context.Context, id int64) (string, error) {
	return q.q.OrderGetStatus(ctx, id)
}
