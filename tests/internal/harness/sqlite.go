package harness

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb/sqlitebiz"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// SQLite is the Factory for SQLite through database/sql and
// modernc.org/sqlite: a database file of its own per test, opened as
// modernc.DSN says.
//
// SQLite has one isolation level, SERIALIZABLE. Begin maps the levels onto
// the two ways a writing transaction can begin:
//   - Default is the database's configured default, BEGIN IMMEDIATE (what
//     the Open of sqlitedriver/modernc and /mattn sets): the transaction takes the database's write
//     lock at BEGIN, waiting up to busy_timeout for the one who holds it.
//     Two such transactions are never open at once.
//   - ReadCommitted, RepeatableRead and Serializable begin DEFERRED, SQLite's
//     own default: the transaction reads a snapshot and takes the write lock
//     at its first write. If another transaction committed in between, that
//     write fails at once with SQLITE_BUSY_SNAPSHOT (retryable), as
//     PostgreSQL's REPEATABLE READ and SERIALIZABLE fail with 40001.
func SQLite(t testing.TB, maxConns int) DB[*sql.Tx] {
	t.Helper()
	db := testdb.NewSQLiteWith(t, testdb.Modernc, maxConns)
	return newLiteDB(t, db, maxConns)
}

// SQLiteMattn is SQLite through github.com/mattn/go-sqlite3 (cgo), opened
// as mattn.DSN says.
func SQLiteMattn(t testing.TB, maxConns int) DB[*sql.Tx] {
	t.Helper()
	db := testdb.NewSQLiteWith(t, testdb.Mattn, maxConns)
	return newLiteDB(t, db, maxConns)
}

func newLiteDB(t testing.TB, db *testdb.SQLite, maxConns int) *liteDB {
	t.Helper()
	if maxConns <= 0 {
		maxConns = 8
	}
	deferred, err := sql.Open(db.Lib.DriverName, strings.Replace(db.DSN, "_txlock=immediate", "_txlock=deferred", 1))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	deferred.SetMaxOpenConns(maxConns)
	deferred.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { deferred.Close() })
	d, err := sqlitedriver.New(db.DB)
	if err != nil {
		t.Fatal(err)
	}
	return &liteDB{db: db, deferred: deferred, driver: d}
}

type liteDB struct {
	db *testdb.SQLite
	// deferred is a second pool on the same file whose transactions begin
	// DEFERRED.
	deferred *sql.DB
	driver   *sqlitedriver.Driver
}

func (l *liteDB) Dialect() string                 { return "sqlite" }
func (l *liteDB) Driver() sqlonce.Driver[*sql.Tx] { return l.driver }
func (l *liteDB) DSN() string                     { return l.db.DSN }

// SQLDriverName is the database/sql driver name that opens DSN.
func (l *liteDB) SQLDriverName() string { return l.db.Lib.DriverName }

func (l *liteDB) Begin(ctx context.Context, iso Isolation) (*sql.Tx, error) {
	if iso == Default {
		return l.db.DB.BeginTx(ctx, nil)
	}
	return l.deferred.BeginTx(ctx, nil)
}

func (l *liteDB) Commit(_ context.Context, tx *sql.Tx) error   { return tx.Commit() }
func (l *liteDB) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }

func (l *liteDB) Tx(tx *sql.Tx) Biz { return liteBiz{q: sqlitebiz.New(tx)} }
func (l *liteDB) Pool() Biz         { return liteBiz{q: sqlitebiz.New(l.db.DB)} }

// liteNow is the database clock in microseconds, as sqlonce's queries read it.
const liteNow = "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)"

func (l *liteDB) Key(ctx context.Context, scope, key string) (KeyRow, bool, error) {
	var r KeyRow
	var hasResponse, leased, expired, lockedUntil int64
	err := l.db.DB.QueryRowContext(ctx, `
		SELECT fingerprint, response, response IS NOT NULL, state, token,
		       coalesce(state = 2 AND locked_until > `+liteNow+`, 0),
		       expires_at <= `+liteNow+`,
		       coalesce(locked_until, 0)
		FROM sqlonce_keys WHERE scope = ? AND idempotency_key = ?`, scope, key).
		Scan(&r.Fingerprint, &r.Response, &hasResponse, &r.State, &r.Token, &leased, &expired, &lockedUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return KeyRow{}, false, nil
	}
	if hasResponse == 1 && r.Response == nil {
		r.Response = []byte{} // the libraries read a zero-length BLOB as nil
	}
	r.Leased, r.Expired = leased == 1, expired == 1
	r.LockedUntil = unixMicro(lockedUntil)
	return r, err == nil, err
}

func (l *liteDB) KeyCount(ctx context.Context) (int64, error) {
	var n int64
	err := l.db.DB.QueryRowContext(ctx, "SELECT count(*) FROM sqlonce_keys").Scan(&n)
	return n, err
}

func (l *liteDB) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := l.db.DB.ExecContext(ctx, sql, args...)
	return err
}

// ErrNoConnections is returned by ConnID and Kill on SQLite: an embedded
// database has no server sessions to name or to kill.
var ErrNoConnections = errors.New("harness: SQLite has no server connections")

func (l *liteDB) TxExec(ctx context.Context, tx *sql.Tx, stmt string) error {
	_, err := tx.ExecContext(ctx, stmt)
	return err
}

func (l *liteDB) ConnID(context.Context, *sql.Tx) (int64, error) { return 0, ErrNoConnections }
func (l *liteDB) Kill(context.Context, int64) error              { return ErrNoConnections }

// Warm opens n connections in both pools without holding n transactions:
// n transactions that write cannot be open at once on SQLite.
func (l *liteDB) Warm(ctx context.Context, n int) error {
	var (
		mu    sync.Mutex
		conns []*sql.Conn
		first error
	)
	var wg sync.WaitGroup
	for _, pool := range []*sql.DB{l.db.DB, l.deferred} {
		for range n {
			wg.Go(func() {
				c, err := pool.Conn(ctx)
				if err == nil {
					err = c.PingContext(ctx)
				}
				mu.Lock()
				defer mu.Unlock()
				if c != nil {
					conns = append(conns, c)
				}
				if err != nil && first == nil {
					first = err
				}
			})
		}
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	return first
}

type liteBiz struct{ q *sqlitebiz.Queries }

func liteOrder(o sqlitebiz.Order) Order {
	return Order{ID: o.ID, Code: o.Code, Customer: o.Customer, Amount: o.Amount, Status: o.Status, Version: o.Version}
}

func (b liteBiz) OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsert(ctx, sqlitebiz.OrderInsertParams{Code: code, Customer: customer, Amount: amount})
}

func (b liteBiz) OrderGetByCode(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCode(ctx, code)
	return liteOrder(o), err
}

func (b liteBiz) OrderGetByID(ctx context.Context, id int64) (Order, error) {
	o, err := b.q.OrderGetByID(ctx, id)
	return liteOrder(o), err
}

func (b liteBiz) OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error) {
	return b.q.OrderAddAmount(ctx, sqlitebiz.OrderAddAmountParams{ID: id, Version: version, Delta: delta})
}

func (b liteBiz) OrderAddAmountAll(ctx context.Context, version, delta int64) (int64, error) {
	return b.q.OrderAddAmountAll(ctx, sqlitebiz.OrderAddAmountAllParams{Version: version, Delta: delta})
}

func (b liteBiz) OrderGetVersion(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersion(ctx, id)
}

func (b liteBiz) OrderGetVersionSnapshot(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderGetVersionSnapshot(ctx, id)
}

func (b liteBiz) OrderGetByCodeSnapshot(ctx context.Context, code string) (Order, error) {
	o, err := b.q.OrderGetByCodeSnapshot(ctx, code)
	return liteOrder(o), err
}

func (b liteBiz) OrderGetStatusSnapshot(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatusSnapshot(ctx, id)
}

func (b liteBiz) OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error) {
	return b.q.OrderSetStatus(ctx, sqlitebiz.OrderSetStatusParams{ID: id, FromStatus: from, ToStatus: to})
}

func (b liteBiz) OrderGetStatus(ctx context.Context, id int64) (string, error) {
	return b.q.OrderGetStatus(ctx, id)
}

func (b liteBiz) OrderDelete(ctx context.Context, id int64) (int64, error) {
	return b.q.OrderDelete(ctx, id)
}

func (b liteBiz) OrderCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.OrderCountByCode(ctx, code)
}

func (b liteBiz) OrderCount(ctx context.Context) (int64, error) { return b.q.OrderCount(ctx) }

func (b liteBiz) LedgerInsert(ctx context.Context, ref string, amount int64) error {
	return b.q.LedgerInsert(ctx, sqlitebiz.LedgerInsertParams{Ref: ref, Amount: amount})
}

func (b liteBiz) LedgerExistsByRef(ctx context.Context, ref string) (bool, error) {
	return b.q.LedgerExistsByRef(ctx, ref)
}

func (b liteBiz) LedgerCountByRef(ctx context.Context, ref string) (int64, error) {
	return b.q.LedgerCountByRef(ctx, ref)
}

func (b liteBiz) LedgerCountPerRef(ctx context.Context) (map[string]int64, error) {
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

func (b liteBiz) OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIfAbsent(ctx, sqlitebiz.OrderInsertIfAbsentParams{Code: code, Customer: customer, Amount: amount})
}

func (b liteBiz) OrderInsertIgnore(ctx context.Context, code, customer string, amount int64) (int64, error) {
	return b.q.OrderInsertIgnore(ctx, sqlitebiz.OrderInsertIgnoreParams{Code: code, Customer: customer, Amount: amount})
}

func (b liteBiz) ShipmentInsert(ctx context.Context, code string, orderID int64, carrier *string) error {
	return b.q.ShipmentInsert(ctx, sqlitebiz.ShipmentInsertParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b liteBiz) ShipmentInsertIfAbsent(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIfAbsent(ctx, sqlitebiz.ShipmentInsertIfAbsentParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b liteBiz) ShipmentInsertIgnore(ctx context.Context, code string, orderID int64, carrier *string) (int64, error) {
	return b.q.ShipmentInsertIgnore(ctx, sqlitebiz.ShipmentInsertIgnoreParams{Code: code, OrderID: orderID, Carrier: nullString(carrier)})
}

func (b liteBiz) ShipmentCountByCode(ctx context.Context, code string) (int64, error) {
	return b.q.ShipmentCountByCode(ctx, code)
}
