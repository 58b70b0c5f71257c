package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/pgsqlbiz"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// PostgresSQL is the Factory for PostgreSQL through database/sql with
// pgx's stdlib driver ("pgx").
func PostgresSQL(t testing.TB, maxConns int) DB[*sql.Tx] {
	t.Helper()
	return keptPgSQL(t, "pgx", maxConns)
}

// PostgresPQ is the Factory for PostgreSQL through database/sql with
// lib/pq ("postgres").
func PostgresPQ(t testing.TB, maxConns int) DB[*sql.Tx] {
	t.Helper()
	return keptPgSQL(t, "postgres", maxConns)
}

// keptPgSQL is a kept schema (keptFor) opened with the database/sql
// driver sqlDriver. The pgx pool that migrated it is closed: the case
// uses database/sql only.
func keptPgSQL(t testing.TB, sqlDriver string, maxConns int) *pgSQLDB {
	t.Helper()
	k := keptFor(t, fmt.Sprintf("sql-%s/%d", sqlDriver, maxConns), func() *keptSchema {
		pg, drop := testdb.KeptPostgres(t, 2)
		pg.Pool.Close()
		db, err := openPgSQL(sqlDriver, pg.DSN, maxConns)
		if err != nil {
			_ = drop()
			t.Fatal(err)
		}
		return &keptSchema{schema: pg.Schema, handle: db, inUse: sqlInUse(db.db), idle: sqlIdle(db.db, maxConnsOr8(maxConns)), maxIdle: maxConnsOr8(maxConns), drop: func() error {
			db.db.Close()
			return drop()
		}}
	})
	return k.handle.(*pgSQLDB).withDriver(t)
}

// newPgSQL opens dsn with the database/sql driver named sqlDriver ("pgx"
// or "postgres") and builds pgsqldriver on it; the handle is closed when
// t ends.
func newPgSQL(t testing.TB, sqlDriver, dsn string, maxConns int) *pgSQLDB {
	t.Helper()
	p, err := openPgSQL(sqlDriver, dsn, maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.db.Close() })
	return p.withDriver(t)
}

// openPgSQL opens dsn with the database/sql driver sqlDriver, maxConns
// connections at most (0: 8), without a sqlonce driver (withDriver).
func openPgSQL(sqlDriver, dsn string, maxConns int) (*pgSQLDB, error) {
	db, err := sql.Open(sqlDriver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", sqlDriver, err)
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return &pgSQLDB{db: db, dsn: dsn, sqlDriver: sqlDriver}, nil
}

// withDriver returns a copy of p with a new sqlonce driver on its handle.
func (p *pgSQLDB) withDriver(t testing.TB) *pgSQLDB {
	c := *p
	c.driver = testdrv.PgSQL(t, p.db)
	return &c
}

// maxConnsOr8 is a handle's bound for a Factory's maxConns (0: 8).
func maxConnsOr8(maxConns int) int {
	if maxConns <= 0 {
		return 8
	}
	return maxConns
}

// sqlInUse counts db's connections in use.
func sqlInUse(db *sql.DB) func() int {
	return func() int { return db.Stats().InUse }
}

type pgSQLDB struct {
	db        *sql.DB
	dsn       string
	sqlDriver string
	driver    *pgsqldriver.Driver
	// reopenDSN: see pgDB.
	reopenDSN func(t testing.TB, settings map[string]string) string
}

// SQLDriverName is the database/sql driver the handle uses: "pgx" or
// "postgres" (lib/pq).
func (p *pgSQLDB) SQLDriverName() string { return p.sqlDriver }

func (p *pgSQLDB) Dialect() string                 { return "postgres" }
func (p *pgSQLDB) Driver() sqlonce.Driver[*sql.Tx] { return p.driver }
func (p *pgSQLDB) DSN() string                     { return p.dsn }

// SQLDB returns the handle the driver was built with.
func (p *pgSQLDB) SQLDB() *sql.DB { return p.db }

func (p *pgSQLDB) Begin(ctx context.Context, iso Isolation) (*sql.Tx, error) {
	opts := &sql.TxOptions{}
	switch iso {
	case ReadCommitted:
		opts.Isolation = sql.LevelReadCommitted
	case RepeatableRead:
		opts.Isolation = sql.LevelRepeatableRead
	case Serializable:
		opts.Isolation = sql.LevelSerializable
	}
	return p.db.BeginTx(ctx, opts)
}

func (p *pgSQLDB) Commit(_ context.Context, tx *sql.Tx) error   { return tx.Commit() }
func (p *pgSQLDB) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }

func (p *pgSQLDB) Tx(tx *sql.Tx) Biz { return pgsqlBiz{q: pgsqlbiz.New(tx)} }
func (p *pgSQLDB) Pool() Biz         { return pgsqlBiz{q: pgsqlbiz.New(p.db)} }

func (p *pgSQLDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	var r KeyRow
	var lockedUntil int64
	err := p.db.QueryRowContext(ctx, `
		SELECT fingerprint, response, state, token,
		       coalesce(state = 2 AND locked_until > now(), false),
		       expires_at <= now(),
		       coalesce((extract(epoch FROM locked_until) * 1000000)::bigint, 0)
		FROM sqlonce_keys WHERE scope = $1 AND idempotency_key = $2`, scope, key).
		Scan(&r.Fingerprint, &r.Response, &r.State, &r.Token, &r.Leased, &r.Expired, &lockedUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return KeyRow{}, false, nil
	}
	r.LockedUntil = unixMicro(lockedUntil)
	return r, err == nil, err
}

func (p *pgSQLDB) KeyCount(ctx context.Context) (int64, error) {
	var n int64
	err := p.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlonce_keys").Scan(&n)
	return n, err
}

func (p *pgSQLDB) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := p.db.ExecContext(ctx, sql, args...)
	return err
}

func (p *pgSQLDB) TxExec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}

func (p *pgSQLDB) ConnID(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id)
	return id, err
}

func (p *pgSQLDB) Kill(ctx context.Context, connID int64) error {
	_, err := p.db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", connID)
	return err
}

type pgsqlBiz struct{ q *pgsqlbiz.Queries }

func pgsqlOrder(o pgsqlbiz.Order) Order {
	return Order{ID: o.ID, Code: o.Code, Customer: o.Customer, Amount: o.Amount, Status: o.Status, Version: o.Version}
}

func (b pgsqlBiz) OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsert(ctx, pgsqlbiz.OrderInsertParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgsqlBiz) OrderGetByCode(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCode(ctx, code)
	return pgsqlOrder(o), err
}

func (b pgsqlBiz) OrderGetByID(ctx context.Context, id int64) (Order, error) {
	o, err := b.q.OrderGetByID(ctx, id)
	return pgsqlOrder(o), err
}

func (b pgsqlBiz) OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return b.q.OrderAddAmount(ctx, pgsqlbiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}

func (b pgsqlBiz) OrderAddAmountAll(ctx context.Context, version, delta int64) (int64, error) {
	return b.q.OrderAddAmountAll(ctx, pgsqlbiz.OrderAddAmountAllParams{Version: version, Delta: delta})
}

func (b pgsqlBiz) OrderGetVersion(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersion(ctx, id)
}

func (b pgsqlBiz) OrderGetVersionSnapshot(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersionSnapshot(ctx, id)
}

func (b pgsqlBiz) OrderGetByCodeSnapshot(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCodeSnapshot(ctx, code)
	return pgsqlOrder(o), err
}

func (b pgsqlBiz) OrderGetStatusSnapshot(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatusSnapshot(ctx, id)
}

func (b pgsqlBiz) OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return b.q.OrderSetStatus(ctx, pgsqlbiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}

func (b pgsqlBiz) OrderGetStatus(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatus(ctx, id)
}

func (b pgsqlBiz) OrderDelete(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderDelete(ctx, id)
}

func (b pgsqlBiz) OrderCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.OrderCountByCode(ctx, code)
}

func (b pgsqlBiz) OrderCount(ctx context.Context) (int64, error) { return b.q.OrderCount(ctx) }

func (b pgsqlBiz) LedgerInsert(ctx context.Context, ref string, amount int64) error {
	return b.q.LedgerInsert(ctx, pgsqlbiz.LedgerInsertParams{Ref: ref, Amount: amount})
}

func (b pgsqlBiz) LedgerExistsByRef(ctx context.Context, ref string) (bool, error) {
	return b.q.LedgerExistsByRef(ctx, ref)
}

func (b pgsqlBiz) LedgerCountByRef(ctx context.Context, ref string) (int64, error) {
	return b.q.LedgerCountByRef(ctx, ref)
}

func (b pgsqlBiz) LedgerCountPerRef(ctx context.Context) (map[string]int64, error) {
	rows, err := b.q.LedgerCountPerRef(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]int64, len(rows))
	for _, r := range rows {
		m[r.Ref] = r.N
	}
	return m, nil
}

func (b pgsqlBiz) OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIfAbsent(ctx, pgsqlbiz.OrderInsertIfAbsentParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgsqlBiz) OrderInsertIgnore(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIgnore(ctx, pgsqlbiz.OrderInsertIgnoreParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgsqlBiz) ShipmentInsert(ctx context.Context, code string, orderID int64, carrier *string) error {
	return b.q.ShipmentInsert(ctx, pgsqlbiz.ShipmentInsertParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b pgsqlBiz) ShipmentInsertIfAbsent(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIfAbsent(ctx, pgsqlbiz.ShipmentInsertIfAbsentParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b pgsqlBiz) ShipmentInsertIgnore(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIgnore(ctx, pgsqlbiz.ShipmentInsertIgnoreParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b pgsqlBiz) ShipmentCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.ShipmentCountByCode(ctx, code)
}
