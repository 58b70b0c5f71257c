// Package harness gives the conformance suite one view of every database:
// an isolated schema, the driver under test, transactions at a chosen
// isolation level, and the business queries (sqlc-generated per dialect)
// behind one interface, so that each case is written once and run on all.
package harness

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
)

// Isolation is a transaction isolation level; "" is the server's default
// (READ COMMITTED on PostgreSQL, REPEATABLE READ on MySQL/MariaDB). SQLite
// has one level; see SQLite for how Begin maps these.
type Isolation string

const (
	Default        Isolation = ""
	ReadCommitted  Isolation = "READ COMMITTED"
	RepeatableRead Isolation = "REPEATABLE READ"
	Serializable   Isolation = "SERIALIZABLE"
)

// Isolations lists the levels every transactional case runs under.
var Isolations = []Isolation{ReadCommitted, RepeatableRead, Serializable}

// Order is a row of the example orders table.
type Order struct {
	ID       int64
	Code     string
	Customer string
	Amount   int64
	Status   string
	Version  int64
}

// Biz runs the business queries on one transaction or on the pool. Reads
// of single rows are locking reads on MySQL/MariaDB (LOCK IN SHARE MODE),
// as the strategies' docs tell MySQL users to write them.
type Biz interface {
	OrderInsert(ctx context.Context, code, customer string, amount int64) (int64, error)
	OrderGetByCode(ctx context.Context, code string) (Order, error)
	OrderGetByID(ctx context.Context, id int64) (Order, error)
	OrderAddAmount(ctx context.Context, id, version, delta int64) (int64, error)
	OrderAddAmountAll(ctx context.Context, version, delta int64) (int64, error)
	OrderGetVersion(ctx context.Context, id int64) (int64, error)
	// OrderGetVersionSnapshot, OrderGetByCodeSnapshot and
	// OrderGetStatusSnapshot are plain reads on MySQL/MariaDB too: under
	// REPEATABLE READ they read the transaction's snapshot, the trap the
	// strategies' docs warn of. On PostgreSQL they are the same reads as
	// the others.
	OrderGetVersionSnapshot(ctx context.Context, id int64) (int64, error)
	OrderGetByCodeSnapshot(ctx context.Context, code string) (Order, error)
	OrderGetStatusSnapshot(ctx context.Context, id int64) (string, error)
	OrderSetStatus(ctx context.Context, id int64, from, to string) (int64, error)
	OrderGetStatus(ctx context.Context, id int64) (string, error)
	OrderDelete(ctx context.Context, id int64) (int64, error)
	OrderCountByCode(ctx context.Context, code string) (int64, error)
	OrderCount(ctx context.Context) (int64, error)
	// OrderInsertIfAbsent is INSERT ... ON CONFLICT (code) DO NOTHING on
	// PostgreSQL and SQLite, returning the rows it inserted (unique.Inserted's
	// statement). MySQL has no conflict target: there it is ON DUPLICATE KEY
	// UPDATE id = id, which inserts nothing on a duplicate of any unique key.
	OrderInsertIfAbsent(ctx context.Context, code, customer string, amount int64) (int64, error)
	// OrderInsertIgnore is the untargeted form: ON CONFLICT DO NOTHING
	// (PostgreSQL, SQLite), INSERT IGNORE (MySQL).
	OrderInsertIgnore(ctx context.Context, code, customer string, amount int64) (int64, error)
	// ShipmentInsert inserts a shipment of order orderID (a foreign key); a
	// nil carrier binds NULL, which the column refuses. IfAbsent and Ignore
	// are the forms above, on shipments_code_key.
	ShipmentInsert(ctx context.Context, code string, orderID int64, carrier *string) error
	ShipmentInsertIfAbsent(ctx context.Context, code string, orderID int64, carrier *string) (int64, error)
	ShipmentInsertIgnore(ctx context.Context, code string, orderID int64, carrier *string) (int64, error)
	ShipmentCountByCode(ctx context.Context, code string) (int64, error)
	LedgerInsert(ctx context.Context, ref string, amount int64) error
	LedgerExistsByRef(ctx context.Context, ref string) (bool, error)
	LedgerCountByRef(ctx context.Context, ref string) (int64, error)
	// LedgerCountPerRef returns the number of ledger rows per ref.
	LedgerCountPerRef(ctx context.Context) (map[string]int64, error)
}

// KeyRow is a raw row of sqlonce_keys, read for assertions.
type KeyRow struct {
	Fingerprint []byte
	Response    []byte
	State       int16
	Token       int64
	Leased      bool // state 2 with locked_until in the future (database clock)
	Expired     bool // expires_at <= now (database clock)
	// LockedUntil is the lease's deadline (UTC, microseconds), zero when
	// the row has none.
	LockedUntil time.Time
}

// unixMicro is a LockedUntil read as microseconds since the epoch, 0 for
// none.
func unixMicro(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// DB is one isolated database (a PostgreSQL schema or a MySQL database)
// with sqlonce's tables and the business tables, for the driver of TTx.
type DB[TTx any] interface {
	// Dialect is "postgres", "mysql" or "sqlite".
	Dialect() string
	// Driver is the driver under test, built with the database handle.
	Driver() sqlonce.Driver[TTx]
	// Begin starts a transaction at the isolation level.
	Begin(ctx context.Context, iso Isolation) (TTx, error)
	Commit(ctx context.Context, tx TTx) error
	Rollback(ctx context.Context, tx TTx) error
	// Tx returns the business queries bound to tx; Pool, bound to the pool
	// (each call its own autocommit statement).
	Tx(tx TTx) Biz
	Pool() Biz
	// Key reads a row of sqlonce_keys outside any transaction; ok is false
	// when there is none.
	Key(ctx context.Context, scope, key string) (row KeyRow, ok bool, err error)
	// KeyCount counts the rows of sqlonce_keys.
	KeyCount(ctx context.Context) (int64, error)
	// Exec runs a statement on the pool (test setup only).
	Exec(ctx context.Context, sql string, args ...any) error
	// TxExec runs a statement in tx (a session setting for one case:
	// SET LOCAL deadlock_timeout).
	TxExec(ctx context.Context, tx TTx, stmt string) error
	// ConnID returns the server's id for tx's connection
	// (pg_backend_pid(), CONNECTION_ID()).
	ConnID(ctx context.Context, tx TTx) (int64, error)
	// Kill terminates a connection from another session
	// (pg_terminate_backend, KILL).
	Kill(ctx context.Context, connID int64) error
	// DSN connects to this database (search_path set on PostgreSQL).
	DSN() string
}

// Warmer is implemented by a DB whose pool must be warmed without holding
// a transaction per connection (SQLite: transactions that take the write
// lock at BEGIN cannot be open at once).
type Warmer interface {
	Warm(ctx context.Context, n int) error
}

// Factory creates an isolated DB for t, dropped when t ends. maxConns
// bounds its pool (0: 8); race cases ask for more than they run.
type Factory[TTx any] func(t testing.TB, maxConns int) DB[TTx]

// WithTx runs fn in a transaction at iso, committing when fn returns nil
// and rolling back otherwise.
func WithTx[TTx any](ctx context.Context, db DB[TTx], iso Isolation, fn func(tx TTx) error) error {
	tx, err := db.Begin(ctx, iso)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = db.Rollback(ctx, tx)
		return err
	}
	return db.Commit(ctx, tx)
}

// nullString binds nil as NULL.
func nullString(s *string) sql.NullString {
	if s == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *s, Valid: true}
}
