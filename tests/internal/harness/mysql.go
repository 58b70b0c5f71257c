package harness

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/mysqlbiz"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// MySQL is the Factory for MySQL/MariaDB through database/sql.
func MySQL(t testing.TB, maxConns int) DB[*sql.Tx] {
	t.Helper()
	db := testdb.NewMySQL(t, maxConns)
	return &myDB{db: db, driver: testdrv.MySQL(t, db.DB)}
}

type myDB struct {
	db     *testdb.MySQL
	driver *mysqldriver.Driver
	// levels, through vtgate (Vitess), are the pools Begin takes a
	// transaction at a level from; nil elsewhere.
	levels *levelPools
	// kill, when set, replaces KILL on the pool (vtgate runs none).
	kill func(ctx context.Context, connID int64) error
}

func (m *myDB) Dialect() string                 { return "mysql" }
func (m *myDB) Driver() sqlonce.Driver[*sql.Tx] { return m.driver }
func (m *myDB) DSN() string                     { return m.db.DSN }

// SQLDB returns the handle the driver was built with.
func (m *myDB) SQLDB() *sql.DB { return m.db.DB }

func (m *myDB) Begin(ctx context.Context, iso Isolation) (*sql.Tx, error) {
	if m.levels != nil && iso != Default {
		p, err := m.levels.pool(iso)
		if err != nil {
			return nil, err
		}
		return p.BeginTx(ctx, nil)
	}
	opts := &sql.TxOptions{}
	switch iso {
	case ReadCommitted:
		opts.Isolation = sql.LevelReadCommitted
	case RepeatableRead:
		opts.Isolation = sql.LevelRepeatableRead
	case Serializable:
		opts.Isolation = sql.LevelSerializable
	}
	return m.db.DB.BeginTx(ctx, opts)
}

func (m *myDB) Commit(_ context.Context, tx *sql.Tx) error   { return tx.Commit() }
func (m *myDB) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }

func (m *myDB) Tx(tx *sql.Tx) Biz { return myBiz{q: mysqlbiz.New(tx)} }
func (m *myDB) Pool() Biz         { return myBiz{q: mysqlbiz.New(m.db.DB)} }

func (m *myDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	return mysqlKey(ctx, m.db.DB, scope, key)
}

func (m *myDB) KeyCount(ctx context.Context) (int64, error) { return mysqlKeyCount(ctx, m.db.DB) }

// mysqlKey reads the key row of scope and key on db, for myDB and
// vtTenantDB (through vtgate a read by scope goes to the scope's shard).
func mysqlKey(ctx context.Context, db *sql.DB, scope, key string) (KeyRow, bool, error) {
	var r KeyRow
	var leased, expired, lockedUntil int64
	err := db.QueryRowContext(ctx, `
		SELECT fingerprint, response, state, token,
		       COALESCE(state = 2 AND locked_until > UTC_TIMESTAMP(6), 0),
		       expires_at <= UTC_TIMESTAMP(6),
		       COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', locked_until), 0)
		FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?`, scope, key).
		Scan(&r.Fingerprint, &r.Response, &r.State, &r.Token, &leased, &expired, &lockedUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return KeyRow{}, false, nil
	}
	r.Leased, r.Expired = leased == 1, expired == 1
	r.LockedUntil = unixMicro(lockedUntil)
	return r, err == nil, err
}

// mysqlKeyCount counts the rows of sqlonce_keys on db (through vtgate on
// the keyspace, over every shard).
func mysqlKeyCount(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlonce_keys").Scan(&n)
	return n, err
}

func (m *myDB) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := m.db.DB.ExecContext(ctx, sql, args...)
	return err
}

func (m *myDB) TxExec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}

func (m *myDB) ConnID(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}

func (m *myDB) Kill(ctx context.Context, connID int64) error {
	if m.kill != nil {
		return m.kill(ctx, connID)
	}
	_, err := m.db.DB.ExecContext(ctx, "KILL ?", connID)
	return err
}

type myBiz struct{ q *mysqlbiz.Queries }

func myOrder(o mysqlbiz.Order) Order {
	return Order{ID: o.ID, Code: o.Code, Customer: o.Customer, Amount: o.Amount, Status: o.Status, Version: o.Version}
}

func (b myBiz) OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error) {
	res, err := b.q.OrderInsert(ctx, mysqlbiz.OrderInsertParams{Code: code, Customer: customer, Amount: amount})
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (b myBiz) OrderGetByCode(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCode(ctx, code)
	return myOrder(o), err
}

func (b myBiz) OrderGetByID(ctx context.Context, id int64) (Order, error) {
	o, err := b.q.OrderGetByID(ctx, id)
	return myOrder(o), err
}

func (b myBiz) OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return b.q.OrderAddAmount(ctx, mysqlbiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}

func (b myBiz) OrderAddAmountAll(ctx context.Context, version, delta int64) (int64, error) {
	return b.q.OrderAddAmountAll(ctx, mysqlbiz.OrderAddAmountAllParams{Version: version, Delta: delta})
}

func (b myBiz) OrderGetVersion(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersion(ctx, id)
}

func (b myBiz) OrderGetVersionSnapshot(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersionSnapshot(ctx, id)
}

func (b myBiz) OrderGetByCodeSnapshot(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCodeSnapshot(ctx, code)
	return myOrder(o), err
}

func (b myBiz) OrderGetStatusSnapshot(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatusSnapshot(ctx, id)
}

func (b myBiz) OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return b.q.OrderSetStatus(ctx, mysqlbiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}

func (b myBiz) OrderGetStatus(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatus(ctx, id)
}

func (b myBiz) OrderDelete(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderDelete(ctx, id)
}

func (b myBiz) OrderCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.OrderCountByCode(ctx, code)
}

func (b myBiz) OrderCount(ctx context.Context) (int64, error) { return b.q.OrderCount(ctx) }

func (b myBiz) LedgerInsert(ctx context.Context, ref string, amount int64) error {
	return b.q.LedgerInsert(ctx, mysqlbiz.LedgerInsertParams{Ref: ref, Amount: amount})
}

func (b myBiz) LedgerExistsByRef(ctx context.Context, ref string) (bool, error) {
	return b.q.LedgerExistsByRef(ctx, ref)
}

func (b myBiz) LedgerCountByRef(ctx context.Context, ref string) (int64, error) {
	return b.q.LedgerCountByRef(ctx, ref)
}

func (b myBiz) LedgerCountPerRef(ctx context.Context) (map[string]int64, error) {
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

func (b myBiz) OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIfAbsent(ctx, mysqlbiz.OrderInsertIfAbsentParams{Code: code, Customer: customer, Amount: amount})
}

func (b myBiz) OrderInsertIgnore(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIgnore(ctx, mysqlbiz.OrderInsertIgnoreParams{Code: code, Customer: customer, Amount: amount})
}

func (b myBiz) ShipmentInsert(ctx context.Context, code string, orderID int64, carrier *string) error {
	return b.q.ShipmentInsert(ctx, mysqlbiz.ShipmentInsertParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b myBiz) ShipmentInsertIfAbsent(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIfAbsent(ctx, mysqlbiz.ShipmentInsertIfAbsentParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b myBiz) ShipmentInsertIgnore(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIgnore(ctx, mysqlbiz.ShipmentInsertIgnoreParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b myBiz) ShipmentCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.ShipmentCountByCode(ctx, code)
}
