package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/pgbiz"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// Postgres is the Factory for PostgreSQL through pgx.
func Postgres(t testing.TB, maxConns int) DB[pgx.Tx] {
	t.Helper()
	k := keptFor(t, fmt.Sprintf("pgx/%d", maxConns), func() *keptSchema {
		db, drop := testdb.KeptPostgres(t, int32(maxConns))
		return &keptSchema{schema: db.Schema, handle: &pgDB{db: db}, inUse: pgxInUse(db.Pool), idle: pgxIdle(db.Pool), maxIdle: int(db.Pool.Config().MaxConns), drop: drop}
	})
	return k.handle.(*pgDB).withDriver(t)
}

// withDriver returns a copy of p with a new sqlonce driver on its pool.
func (p *pgDB) withDriver(t testing.TB) *pgDB {
	c := *p
	c.driver = testdrv.Pgx(t, p.db.Pool)
	return &c
}

// pgxInUse counts pool's connections in use.
func pgxInUse(pool *pgxpool.Pool) func() int {
	return func() int { return int(pool.Stat().AcquiredConns()) }
}

type pgDB struct {
	db     *testdb.Postgres
	driver *pgxdriver.Driver
	// reopenDSN, behind a PgBouncer, returns the DSN of a bouncer database
	// of the same schema whose server connections carry settings (Reopen).
	reopenDSN func(t testing.TB, settings map[string]string) string
}

func (p *pgDB) Dialect() string                { return "postgres" }
func (p *pgDB) Driver() sqlonce.Driver[pgx.Tx] { return p.driver }
func (p *pgDB) DSN() string                    { return p.db.DSN }

func (p *pgDB) Begin(ctx context.Context, iso Isolation) (pgx.Tx, error) {
	opts := pgx.TxOptions{}
	switch iso {
	case ReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	case RepeatableRead:
		opts.IsoLevel = pgx.RepeatableRead
	case Serializable:
		opts.IsoLevel = pgx.Serializable
	}
	return p.db.Pool.BeginTx(ctx, opts)
}

func (p *pgDB) Commit(ctx context.Context, tx pgx.Tx) error   { return tx.Commit(ctx) }
func (p *pgDB) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

func (p *pgDB) Tx(tx pgx.Tx) Biz { return pgBiz{q: pgbiz.New(tx)} }
func (p *pgDB) Pool() Biz        { return pgBiz{q: pgbiz.New(p.db.Pool)} }

func (p *pgDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	var r KeyRow
	var lockedUntil int64
	err := p.db.Pool.QueryRow(ctx, `
		SELECT fingerprint, response, state, token,
		       coalesce(state = 2 AND locked_until > now(), false),
		       expires_at <= now(),
		       coalesce((extract(epoch FROM locked_until) * 1000000)::bigint, 0)
		FROM sqlonce_keys WHERE scope = $1 AND idempotency_key = $2`, scope, key).
		Scan(&r.Fingerprint, &r.Response, &r.State, &r.Token, &r.Leased, &r.Expired, &lockedUntil)
	if errors.Is(err, pgx.ErrNoRows) {
		return KeyRow{}, false, nil
	}
	r.LockedUntil = unixMicro(lockedUntil)
	return r, err == nil, err
}

func (p *pgDB) KeyCount(ctx context.Context) (int64, error) {
	var n int64
	err := p.db.Pool.QueryRow(ctx, "SELECT count(*) FROM sqlonce_keys").Scan(&n)
	return n, err
}

func (p *pgDB) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := p.db.Pool.Exec(ctx, sql, args...)
	return err
}

func (p *pgDB) TxExec(ctx context.Context, tx pgx.Tx, stmt string) error {
	_, err := tx.Exec(ctx, stmt)
	return err
}

func (p *pgDB) ConnID(ctx context.Context, tx pgx.Tx) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&id)
	return id, err
}

func (p *pgDB) Kill(ctx context.Context, connID int64) error {
	_, err := p.db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", connID)
	return err
}

type pgBiz struct{ q *pgbiz.Queries }

func pgOrder(o pgbiz.Order) Order {
	return Order{ID: o.ID, Code: o.Code, Customer: o.Customer, Amount: o.Amount, Status: o.Status, Version: o.Version}
}

func (b pgBiz) OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsert(ctx, pgbiz.OrderInsertParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgBiz) OrderGetByCode(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCode(ctx, code)
	return pgOrder(o), err
}

func (b pgBiz) OrderGetByID(ctx context.Context, id int64) (Order, error) {
	o, err := b.q.OrderGetByID(ctx, id)
	return pgOrder(o), err
}

func (b pgBiz) OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return b.q.OrderAddAmount(ctx, pgbiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}

func (b pgBiz) OrderAddAmountAll(ctx context.Context, version, delta int64) (int64, error) {
	return b.q.OrderAddAmountAll(ctx, pgbiz.OrderAddAmountAllParams{Version: version, Delta: delta})
}

func (b pgBiz) OrderGetVersion(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersion(ctx, id)
}

func (b pgBiz) OrderGetVersionSnapshot(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersionSnapshot(ctx, id)
}

func (b pgBiz) OrderGetByCodeSnapshot(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCodeSnapshot(ctx, code)
	return pgOrder(o), err
}

func (b pgBiz) OrderGetStatusSnapshot(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatusSnapshot(ctx, id)
}

func (b pgBiz) OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return b.q.OrderSetStatus(ctx, pgbiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}

func (b pgBiz) OrderGetStatus(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatus(ctx, id)
}

func (b pgBiz) OrderDelete(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderDelete(ctx, id)
}

func (b pgBiz) OrderCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.OrderCountByCode(ctx, code)
}

func (b pgBiz) OrderCount(ctx context.Context) (int64, error) { return b.q.OrderCount(ctx) }

func (b pgBiz) LedgerInsert(ctx context.Context, ref string, amount int64) error {
	return b.q.LedgerInsert(ctx, pgbiz.LedgerInsertParams{Ref: ref, Amount: amount})
}

func (b pgBiz) LedgerExistsByRef(ctx context.Context, ref string) (bool, error) {
	return b.q.LedgerExistsByRef(ctx, ref)
}

func (b pgBiz) LedgerCountByRef(ctx context.Context, ref string) (int64, error) {
	return b.q.LedgerCountByRef(ctx, ref)
}

func (b pgBiz) LedgerCountPerRef(ctx context.Context) (map[string]int64, error) {
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

func (b pgBiz) OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIfAbsent(ctx, pgbiz.OrderInsertIfAbsentParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgBiz) OrderInsertIgnore(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIgnore(ctx, pgbiz.OrderInsertIgnoreParams{Code: code, Customer: customer, Amount: amount})
}

func (b pgBiz) ShipmentInsert(ctx context.Context, code string, orderID int64, carrier *string) error {
	return b.q.ShipmentInsert(ctx, pgbiz.ShipmentInsertParams{Code: code, OrderID: orderID, Carrier: pgText(carrier)})
}

func (b pgBiz) ShipmentInsertIfAbsent(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIfAbsent(ctx, pgbiz.ShipmentInsertIfAbsentParams{Code: code, OrderID: orderID, Carrier: pgText(carrier)})
}

func (b pgBiz) ShipmentInsertIgnore(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIgnore(ctx, pgbiz.ShipmentInsertIgnoreParams{Code: code, OrderID: orderID, Carrier: pgText(carrier)})
}

func (b pgBiz) ShipmentCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.ShipmentCountByCode(ctx, code)
}

func pgText(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}
