package harness

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// VitessTenants is a DB on the sharded keyspace of c itself, statements
// routed by the VSchema: sqlonce's tables by vitess.VSchema, and business
// tables of their own shape made for sharding. Each ledger row and order
// has a tenant column, sharded with the xxhash vindex sqlonce_keys.scope
// uses, holding tenant(ref) or tenant(code): a caller whose keys of scope
// S guard rows whose tenant(...) is S finds them on the key's shard, as
// docs/deployments.md tells Vitess users to arrange. Ids are explicit (a
// process-wide counter), never AUTO_INCREMENT, which each shard would
// count on its own; an order's tenant is looked up by its id in memory
// (the orders are this process's), so that a statement by id is routed
// to the order's shard instead of every shard (a write on every shard is
// refused in transaction_mode=single).
//
// Biz has the statements of the checker (the ledger and the orders by
// code and by id); the others answer an error. Kill kills a tablet's
// connection (vtgate runs no KILL): CONNECTION_ID() names a tablet's
// connection, not the client's, and the client's session lives on.
func VitessTenants(t testing.TB, c *vitess.Cluster, tenant func(s string) string, maxConns int) DB[*sql.Tx] {
	t.Helper()
	if err := vtSetup(&vtTenantSchema, c, append(append([]string(nil), vitess.VSchema...), VitessTenantsVSchema...), vtTenantTables); err != nil {
		t.Fatalf("schema through vtgate: %v", err)
	}
	if maxConns <= 0 {
		maxConns = 8
	}
	dsn := c.DSN(vitess.Keyspace, vitess.Single, "parseTime=true")
	// The tables are the cluster's: empty them of an earlier DB's rows
	// (go test -count), shard by shard.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, shard := range vitess.Shards {
		if err := vtEmpty(ctx, c.DSN(vitess.Keyspace+":"+shard), "ledger", "orders", "sqlonce_keys", "sqlonce_tokens"); err != nil {
			t.Fatalf("empty shard %s: %v", shard, err)
		}
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return &vtTenantDB{c: c, db: db, dsn: dsn, driver: testdrv.MySQL(t, db), tenant: tenant, levels: newLevelPools(t, dsn, maxConns)}
}

// VitessTenantsVSchema is what VitessTenants adds to vitess.VSchema.
var VitessTenantsVSchema = []string{
	"ALTER VSCHEMA ON ledger ADD VINDEX xxhash(tenant) USING xxhash",
	"ALTER VSCHEMA ON orders ADD VINDEX xxhash(tenant) USING xxhash",
}

var vtTenantDDL = []string{
	`CREATE TABLE ledger (
    tenant VARCHAR(64) NOT NULL,
    id     BIGINT      NOT NULL,
    ref    VARCHAR(64) NOT NULL,
    amount BIGINT      NOT NULL,
    PRIMARY KEY (id),
    KEY ledger_ref_idx (tenant, ref)
) ENGINE = InnoDB`,
	// code's tenant decides its shard, so the unique key per shard is
	// unique over the keyspace.
	`CREATE TABLE orders (
    tenant   VARCHAR(64) NOT NULL,
    id       BIGINT      NOT NULL,
    code     VARCHAR(64) NOT NULL,
    customer VARCHAR(64) NOT NULL DEFAULT '',
    amount   BIGINT      NOT NULL DEFAULT 0,
    status   VARCHAR(32) NOT NULL DEFAULT 'created',
    version  BIGINT      NOT NULL DEFAULT 1,
    PRIMARY KEY (id),
    UNIQUE KEY orders_code_key (code)
) ENGINE = InnoDB`,
}

// vtTenantSchema is VitessTenants's schema: VitessTenantsVSchema too,
// and vtTenantDDL's tables on the keyspace.
var vtTenantSchema vtOnce

// vtTenantTables makes vtTenantDDL's tables through vtgate on the
// keyspace, which sends the DDL to every shard.
func vtTenantTables(ctx context.Context, db *sql.DB) error {
	for _, s := range vtTenantDDL {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

type vtTenantDB struct {
	c      *vitess.Cluster
	db     *sql.DB
	dsn    string
	driver *mysqldriver.Driver
	tenant func(string) string
	levels *levelPools
	orders sync.Map // id -> tenant
}

// vtIDs gives ledger rows and orders their ids.
var vtIDs atomic.Int64

func init() { vtIDs.Store(time.Now().UnixMicro()) }

func (d *vtTenantDB) Dialect() string                 { return "mysql" }
func (d *vtTenantDB) Driver() sqlonce.Driver[*sql.Tx] { return d.driver }
func (d *vtTenantDB) DSN() string                     { return d.dsn }

func (d *vtTenantDB) Begin(ctx context.Context, iso Isolation) (*sql.Tx, error) {
	if iso != Default {
		p, err := d.levels.pool(iso)
		if err != nil {
			return nil, err
		}
		return p.BeginTx(ctx, nil)
	}
	return d.db.BeginTx(ctx, nil)
}

func (d *vtTenantDB) Commit(_ context.Context, tx *sql.Tx) error   { return tx.Commit() }
func (d *vtTenantDB) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }
func (d *vtTenantDB) Tx(tx *sql.Tx) Biz                            { return vtBiz{d: d, q: tx} }
func (d *vtTenantDB) Pool() Biz                                    { return vtBiz{d: d, q: d.db} }

func (d *vtTenantDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	return mysqlKey(ctx, d.db, scope, key)
}

func (d *vtTenantDB) KeyCount(ctx context.Context) (int64, error) { return mysqlKeyCount(ctx, d.db) }

func (d *vtTenantDB) Exec(ctx context.Context, stmt string, args ...any) error {
	_, err := d.db.ExecContext(ctx, stmt, args...)
	return err
}

func (d *vtTenantDB) TxExec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}

func (d *vtTenantDB) ConnID(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}

// Kill kills a tablet's connection in the mysqld behind the tablets
// (vtKill): the one whose id ConnID read, which vtgate sent to one of the
// shards.
func (d *vtTenantDB) Kill(ctx context.Context, id int64) error { return vtKill(ctx, d.c, id) }

// orderTenant is the tenant of order id: this process's orders are
// remembered; another's is looked up on every shard (a read).
func (d *vtTenantDB) orderTenant(ctx context.Context, q vtQuerier, id int64) (string, error) {
	if t, ok := d.orders.Load(id); ok {
		return t.(string), nil
	}
	var t string
	if err := q.QueryRowContext(ctx, "SELECT tenant FROM orders WHERE id = ?", id).Scan(&t); err != nil {
		return "", err
	}
	d.orders.Store(id, t)
	return t, nil
}

type vtQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// vtBiz: the business statements on the tenant tables, each with the
// tenant column in its WHERE clause or VALUES, so that vtgate routes it
// to one shard. Reads of single rows lock, as myBiz's do.
type vtBiz struct {
	d *vtTenantDB
	q vtQuerier
}

var errVtBiz = errors.New("harness: not on the Vitess tenant tables")

func (b vtBiz) OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error) {
	id, tenant := vtIDs.Add(1), b.d.tenant(code)
	if _, err := b.q.ExecContext(ctx, "INSERT INTO orders (tenant, id, code, customer, amount) VALUES (?, ?, ?, ?, ?)",
		tenant, id, code, customer, amount); err != nil {
		return 0, err
	}
	b.d.orders.Store(id, tenant)
	return id, nil
}

func (b vtBiz) OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	id, tenant := vtIDs.Add(1), b.d.tenant(code)
	res, err := b.q.ExecContext(ctx, "INSERT INTO orders (tenant, id, code, customer, amount) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
		tenant, id, code, customer, amount)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if n == 1 {
		b.d.orders.Store(id, tenant)
	}
	return n, err
}

func (b vtBiz) OrderGetByCode(ctx context.Context, code string) (Order, error) {
	var o Order
	err := b.q.QueryRowContext(ctx, "SELECT id, code, customer, amount, status, version FROM orders WHERE tenant = ? AND code = ? LOCK IN SHARE MODE",
		b.d.tenant(code), code).Scan(&o.ID, &o.Code, &o.Customer, &o.Amount, &o.Status, &o.Version)
	if err == nil {
		b.d.orders.Store(o.ID, b.d.tenant(code))
	}
	return o, err
}

func (b vtBiz) OrderGetByID(ctx context.Context, id int64) (Order, error) {
	tenant, err := b.d.orderTenant(ctx, b.q, id)
	if err != nil {
		return Order{}, err
	}
	var o Order
	err = b.q.QueryRowContext(ctx, "SELECT id, code, customer, amount, status, version FROM orders WHERE tenant = ? AND id = ? LOCK IN SHARE MODE",
		tenant, id).Scan(&o.ID, &o.Code, &o.Customer, &o.Amount, &o.Status, &o.Version)
	return o, err
}

func (b vtBiz) byID(ctx context.Context, id int64, query string, args ...any) (int64, error) {
	tenant, err := b.d.orderTenant(ctx, b.q, id)
	if err != nil {
		return 0, err
	}
	res, err := b.q.ExecContext(ctx, query, append(args, tenant, id)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (b vtBiz) OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return b.byID(ctx, id, "UPDATE orders SET amount = amount + ?, version = version + 1 WHERE version = ? AND tenant = ? AND id = ?", delta, version)
}

func (b vtBiz) OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return b.byID(ctx, id, "UPDATE orders SET status = ? WHERE status = ? AND tenant = ? AND id = ?", to, from)
}

func (b vtBiz) OrderDelete(ctx context.Context, id int64) (int64, error) {
	return b.byID(ctx, id, "DELETE FROM orders WHERE tenant = ? AND id = ?")
}

func (b vtBiz) oneByID(ctx context.Context, id int64, col string, dst any) error {
	tenant, err := b.d.orderTenant(ctx, b.q, id)
	if err != nil {
		return err
	}
	return b.q.QueryRowContext(ctx, "SELECT "+col+" FROM orders WHERE tenant = ? AND id = ? LOCK IN SHARE MODE", tenant, id).Scan(dst)
}

func (b vtBiz) OrderGetVersion(ctx context.Context, id int64) (int64, error) {
	var v int64
	err := b.oneByID(ctx, id, "version", &v)
	return v, err
}

func (b vtBiz) OrderGetStatus(ctx context.Context, id int64) (string, error) {
	var s string
	err := b.oneByID(ctx, id, "status", &s)
	return s, err
}

func (b vtBiz) OrderCountByCode(ctx context.Context, code string) (int64, error) {
	var n int64
	err := b.q.QueryRowContext(ctx, "SELECT count(*) FROM orders WHERE tenant = ? AND code = ?", b.d.tenant(code), code).Scan(&n)
	return n, err
}

func (b vtBiz) OrderCount(ctx context.Context) (int64, error) {
	var n int64
	err := b.q.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
	return n, err
}

func (b vtBiz) LedgerInsert(ctx context.Context, ref string, amount int64) error {
	_, err := b.q.ExecContext(ctx, "INSERT INTO ledger (tenant, id, ref, amount) VALUES (?, ?, ?, ?)", b.d.tenant(ref), vtIDs.Add(1), ref, amount)
	return err
}

func (b vtBiz) LedgerExistsByRef(ctx context.Context, ref string) (bool, error) {
	var n int64
	err := b.q.QueryRowContext(ctx, "SELECT count(*) FROM ledger WHERE tenant = ? AND ref = ?", b.d.tenant(ref), ref).Scan(&n)
	return n > 0, err
}

func (b vtBiz) LedgerCountByRef(ctx context.Context, ref string) (int64, error) {
	var n int64
	err := b.q.QueryRowContext(ctx, "SELECT count(*) FROM ledger WHERE tenant = ? AND ref = ?", b.d.tenant(ref), ref).Scan(&n)
	return n, err
}

func (b vtBiz) LedgerCountPerRef(context.Context) (map[string]int64, error) { return nil, errVtBiz }
func (b vtBiz) OrderAddAmountAll(context.Context, int64, int64) (int64, error) {
	return 0, errVtBiz
}
func (b vtBiz) OrderGetVersionSnapshot(context.Context, int64) (int64, error) { return 0, errVtBiz }
func (b vtBiz) OrderGetByCodeSnapshot(context.Context, string) (Order, error) {
	return Order{}, errVtBiz
}
func (b vtBiz) OrderGetStatusSnapshot(context.Context, int64) (string, error) { return "", errVtBiz }
func (b vtBiz) OrderInsertIgnore(context.Context, string, string, int64) (int64, error) {
	return 0, errVtBiz
}
func (b vtBiz) ShipmentInsert(context.Context, string, int64, *string) error { return errVtBiz }
func (b vtBiz) ShipmentInsertIfAbsent(context.Context, string, int64, *string) (int64, error) {
	return 0, errVtBiz
}
func (b vtBiz) ShipmentInsertIgnore(context.Context, string, int64, *string) (int64, error) {
	return 0, errVtBiz
}
func (b vtBiz) ShipmentCountByCode(context.Context, string) (int64, error) { return 0, errVtBiz }
