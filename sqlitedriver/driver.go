package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/sqlitedb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Driver is the SQLite driver. It is safe for concurrent use.
// Build it with New: every strategy refuses a zero Driver with an error
// matching sqlonce.ErrInvalidArgument.
type Driver struct {
	e engine
}

var _ sqlonce.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a driver on db: the handle on which the calls that take no
// transaction of yours (Store.Run, leases, RunSteps, purge, token.Issue,
// inbox.Handle...) run transactions of their own. See the package
// documentation for how db must be configured; sqlitedriver/modernc and
// sqlitedriver/mattn open one that is.
//
// db must come from modernc.org/sqlite or github.com/mattn/go-sqlite3,
// whose errors the driver recognises, directly or through a database/sql
// driver that wraps one (a tracing wrapper): New returns an error
// matching sqlonce.ErrInvalidArgument for a nil db and for any other,
// naming the driver to use for a server database's. It tells the library
// by db.Driver()'s type; a wrapper's db is asked for one error (a
// statement that does not parse, sent once, with a 5 s timeout) and
// accepted if that error is a supported library's.
//
// New also refuses, with an error matching sqlonce.ErrInvalidArgument
// that names modernc.Open and mattn.Open, a db whose transactions would
// fail under contention rather than wait, as sql.Open("sqlite", path)
// without their DSN gives: a connection with busy_timeout 0, or
// transactions begun DEFERRED instead of IMMEDIATE. It takes two of the
// pool's connections, waiting at most 100 ms for each and holding no lock
// meanwhile, then begins one transaction, briefly taking the write lock,
// within 5 s; what cannot be done (the pool's connections all in use, the
// database busy that long) it does not check, and accepts db.
func New(db *sql.DB) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlitedriver: nil *sql.DB", sqlonce.ErrInvalidArgument)
	}
	// checkLibrary accepts only a handle whose errors are a SQLite
	// library's, so its transactions need no probe.
	if err := checkLibrary(db); err != nil {
		return nil, err
	}
	if err := checkSettings(db); err != nil {
		return nil, err
	}
	return &Driver{e: engine{db: db, q: sqlitedb.New()}}, nil
}

// Engine is for sqlonce's own packages. It is nil for a nil *Driver and
// for a Driver not built by New (a zero Driver has no handle, and skipped
// New's checks), so that constructors refuse both, with an error matching
// sqlonce.ErrInvalidArgument, instead of panicking or running unchecked.
func (d *Driver) Engine() driver.Engine[*sql.Tx] {
	if d == nil || d.e.db == nil {
		return nil
	}
	return d.e
}

type engine struct {
	db *sql.DB
	q  *sqlitedb.Queries
}

// on returns what the generated queries run on for tx: the handle, in
// autocommit, for driver.AutoTx.
func (e engine) on(tx *sql.Tx) sqlitedb.DBTX { return driver.On(tx, e.db) }

var _ driver.Autocommitter[*sql.Tx] = engine{}

// Autocommit runs fn's statements on the driver's *sql.DB outside any
// transaction, each its own (fn gets driver.AutoTx): a lease's Claim,
// Complete, Release and Extend, and token.Issue, run one statement each,
// without BEGIN and COMMIT around it.
func (e engine) Autocommit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return driver.SQLAutocommit(ctx, fn)
}

var _ driver.DuplicateInTx[*sql.Tx] = engine{}

// Guard runs a single statement as it is: a failed statement rolls back
// alone on SQLite (the default conflict resolution, ABORT) and the
// transaction goes on. fn of several statements runs under a savepoint,
// which undoes all of them, released after a success and after the
// rollback to it: SQLite nests savepoints, as PostgreSQL does, and its
// statements cost no round trip.
func (e engine) Guard(ctx context.Context, tx *sql.Tx, single bool, fn func(ctx context.Context) error) error {
	if single {
		return fn(ctx)
	}
	return driver.SQLSavepoint(ctx, tx, driver.ReleaseAlways, fn)
}

// IsDuplicate matches what needs no lookup: any duplicate for an empty
// constraint, "PRIMARY" for a primary key violation, the columns as SQLite
// reports them, and the name of an index on expressions (which SQLite
// reports by name).
func (engine) IsDuplicate(err error, constraint string) bool {
	for _, d := range duplicates(err) {
		if d.matches(constraint) {
			return true
		}
	}
	return false
}

func (d duplicate) matches(constraint string) bool {
	switch {
	case constraint == "":
		return true
	case strings.EqualFold(constraint, "PRIMARY"):
		return d.primary
	}
	return d.target == constraint || strings.EqualFold(d.target, "index '"+constraint+"'")
}

// IsDuplicateInTx also matches a unique index by its name: it reads the
// index's table and columns from the schema and compares them with the
// columns the error names. Index names compare without regard to case, as
// SQLite compares them.
func (e engine) IsDuplicateInTx(ctx context.Context, tx *sql.Tx, err error, constraint string) (bool, error) {
	if e.IsDuplicate(err, constraint) {
		return true, nil
	}
	target, _, ok := firstDuplicate(err)
	if !ok || target == "" {
		return false, nil
	}
	cols, lErr := indexColumns(ctx, tx, constraint)
	if errors.Is(lErr, sql.ErrNoRows) {
		return false, nil // no index of that name: not this constraint
	}
	if lErr != nil {
		return false, lErr
	}
	return cols != "" && cols == target, nil
}

// A catalog read, not a query on sqlonce's tables: sqlc's SQLite engine
// knows neither sqlite_schema nor the pragma functions. One statement
// reads the index's table and its columns in order.
const sqlIndexColumns = `SELECT m.tbl_name, i.name FROM sqlite_schema AS m, pragma_index_info(m.name) AS i
WHERE m.type = 'index' AND m.name = ? COLLATE NOCASE ORDER BY i.seqno`

// indexColumns returns a unique index's columns as SQLite's duplicate-key
// error names them, "table.col1, table.col2", "" for an index on an
// expression, and sql.ErrNoRows when there is no index of that name.
func indexColumns(ctx context.Context, tx *sql.Tx, index string) (string, error) {
	rows, err := tx.QueryContext(ctx, sqlIndexColumns, index)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var cols []string
	expr := false
	for rows.Next() {
		var table string
		var c sql.NullString // NULL for an expression
		if err := rows.Scan(&table, &c); err != nil {
			return "", err
		}
		if !c.Valid {
			expr = true
		}
		cols = append(cols, table+"."+c.String)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	switch {
	case len(cols) == 0:
		return "", sql.ErrNoRows
	case expr:
		return "", nil
	}
	return strings.Join(cols, ", "), nil
}

func liteNow(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

// Claim ignores p.LockWait: see the package documentation.
func (e engine) Claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	return e.claim(ctx, tx, p)
}

// claimAttempts bounds the loop for a key that vanishes between the claim
// that found it and the read of it (the claim holds the write lock, so
// that cannot happen), or that expires or lapses in between, as the clock
// moves on: the next claim takes it. The bound keeps a clock that steps
// back from looping.
const claimAttempts = 3

func (e engine) claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	ins := sqlitedb.KeyClaimParams{
		Namespace:      int64(p.Namespace),
		Scope:          p.Scope,
		IdempotencyKey: p.Key.Key,
		Fingerprint:    driver.NonNil(p.Fingerprint),
		State:          int64(driver.StateDone),
		Now:            liteNow(p.Now),
		TtlUs:          p.TTL.Microseconds(),
	}
	if p.Lease > 0 {
		ins.State = int64(driver.StateLeased)
		ins.LeaseUs = sql.NullInt64{Int64: p.Lease.Microseconds(), Valid: true}
		ins.TtlUs = max(p.TTL, p.Lease).Microseconds() // keeps locked_until <= expires_at
	}
	for range claimAttempts {
		token, err := e.q.KeyClaim(ctx, e.on(tx), ins)
		if err == nil {
			return driver.Claim{Won: true, Token: token}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return driver.Claim{}, err
		}
		row, err := e.q.KeyGet(ctx, e.on(tx), sqlitedb.KeyGetParams{Now: ins.Now, Namespace: int64(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key})
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return driver.Claim{}, err
		}
		if row.Available == 1 {
			// SQLite reads its clock per statement: the key was live at
			// KeyClaim's "now" and has expired or lapsed at KeyGet's.
			// Judged by KeyClaim's clock it is held, by KeyGet's it is
			// not; reporting it either way would mix the two (a lapsed
			// lease read as done: AlreadyDone for work nobody did).
			// Claim again: the next KeyClaim's "now" is later still.
			continue
		}
		if row.HasResponse == 1 && row.Response == nil {
			row.Response = []byte{}
		}
		return driver.Claim{Existing: driver.Existing{
			Fingerprint: row.Fingerprint,
			Response:    row.Response,
			Leased:      row.Locked == 1,
		}}, nil
	}
	return driver.Claim{}, fmt.Errorf("%w: key changed %d times while being claimed", sqlonce.ErrStaleRead, claimAttempts)
}

func (e engine) SetResponse(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte) error {
	n, err := e.q.KeySetResponse(ctx, e.on(tx), sqlitedb.KeySetResponseParams{
		Response: driver.NonNil(response), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: the claim to record a response on is gone", sqlonce.ErrLeaseLost)
	}
	return nil
}

func (e engine) Unclaim(ctx context.Context, tx *sql.Tx, k driver.Key, token int64) error {
	_, err := e.q.KeyDelete(ctx, e.on(tx), sqlitedb.KeyDeleteParams{Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token})
	return err
}

func (e engine) Complete(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyComplete(ctx, e.on(tx), sqlitedb.KeyCompleteParams{
		Response: driver.NonNil(response), Now: liteNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Release(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, now time.Time) (bool, error) {
	n, err := e.q.KeyRelease(ctx, e.on(tx), sqlitedb.KeyReleaseParams{
		Now: liteNow(now), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Extend(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, lease time.Duration, now time.Time) (bool, error) {
	// SQLite counts matched rows: an Extend to the deadline the lease
	// already has counts as held.
	n, err := e.q.KeyExtend(ctx, e.on(tx), sqlitedb.KeyExtendParams{
		Now: liteNow(now), LeaseUs: lease.Microseconds(), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Inspect(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (driver.KeyInfo, bool, error) {
	r, err := e.q.KeyInspect(ctx, e.on(tx), sqlitedb.KeyInspectParams{Now: liteNow(now), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.KeyInfo{}, false, nil
	}
	if err != nil {
		return driver.KeyInfo{}, false, err
	}
	return driver.KeyInfo{
		State: int16(r.State), Token: r.Token, FingerprintLen: r.FingerprintLen, ResponseLen: r.ResponseLen, HasResponse: r.HasResponse == 1,
		Leased: r.Leased == 1, Expired: r.Expired == 1,
		Created: driver.Micros(r.CreatedAt), Expires: driver.Micros(r.ExpiresAt), LockedUntil: driver.Micros(r.LockedUntilUs),
	}, true, nil
}

func (e engine) Forget(ctx context.Context, tx *sql.Tx, k driver.Key, force bool, now time.Time) (bool, error) {
	f := int64(0)
	if force {
		f = 1
	}
	n, err := e.q.KeyForget(ctx, e.on(tx), sqlitedb.KeyForgetParams{Now: liteNow(now), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, ForceHeld: f})
	return n == 1, err
}

func (e engine) Purge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	return e.q.KeyPurge(ctx, e.on(tx), sqlitedb.KeyPurgeParams{Now: liteNow(now), MaxRows: int64(limit)})
}

func (e engine) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	// Every transaction sqlonce runs itself writes: on a database opened as
	// the package documentation says, it begins IMMEDIATE.
	return driver.SQLInTx(ctx, e.db, fn)
}
