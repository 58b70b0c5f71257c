package pgsqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Driver is the PostgreSQL driver for database/sql. It holds no state of
// its own besides its database handle, and is safe for concurrent use.
// Build it with New: every strategy refuses a zero Driver with an error
// matching sqlonce.ErrInvalidArgument.
type Driver struct {
	e     engine
	check *driver.DialectCheck // nil: db is known to be PostgreSQL's
}

// Option configures a Driver; New applies and validates it.
type Option func(*options) error

type options struct{ schema *driver.Schema }

// WithSchema keeps sqlonce's tables in the named schema instead of the
// one the connection's search_path finds: every statement of sqlonce's
// names its tables qualified ("name".sqlonce_keys), so that it holds
// through PgBouncer's transaction pooling, where a client cannot set
// search_path, and two services sharing a database keep their keys apart.
// Create the tables there with migrations.Up and migrations.WithSchema.
// The name is an unquoted, lower-case identifier (a letter or _, then
// letters, digits or _, at most 63 bytes); any other makes New return an
// error matching sqlonce.ErrInvalidArgument.
func WithSchema(name string) Option {
	return func(o *options) error {
		s, err := driver.NewSchema(driver.Postgres, name)
		if err != nil {
			return fmt.Errorf("%w: pgsqldriver: WithSchema: %v", sqlonce.ErrInvalidArgument, err)
		}
		o.schema = s
		return nil
	}
}

var _ sqlonce.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a driver on db, a *sql.DB of PostgreSQL (pgx's stdlib or
// lib/pq): the handle on which the calls that take no transaction of
// yours (Store.Run, leases, RunSteps, purge, token.Issue,
// inbox.Handle...) run transactions of their own.
//
// A nil db, a db whose database/sql driver is another database's
// (go-sql-driver/mysql, a SQLite library: the error names the driver to
// use), a nil Option or an invalid one is an error matching
// sqlonce.ErrInvalidArgument. A database/sql driver it does not know (a
// wrapper such as otelsql) is accepted, and checked by a probe at the
// first call: every call then returns that error if it is not PostgreSQL.
func New(db *sql.DB, opts ...Option) (*Driver, error) {
	check, err := driver.CheckSQLDialect(db, driver.Postgres, "pgsqldriver", sqlonce.ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: pgsqldriver: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Driver{e: engine{db: db, q: pgsqldb.New(), pq: isPQ(db), schema: o.schema}, check: check}, nil
}

// isPQ reports whether db's database/sql driver is lib/pq's, known by the
// package of its type (no import). lib/pq sends a statement with
// arguments as Parse and Bind in two round trips unless the DSN says
// binary_parameters=yes, which a program cannot be asked for: outside a
// transaction a pooler in transaction mode (PgBouncer) may hand the two to
// different server connections ("unnamed prepared statement does not
// exist", or a Bind meeting another client's statement). Through lib/pq
// the driver therefore runs none of its statements outside a transaction.
func isPQ(db *sql.DB) bool {
	if db == nil {
		return false
	}
	_, pkg := driver.SQLDialect(db)
	return pkg == "github.com/lib/pq" || strings.HasPrefix(pkg, "github.com/lib/pq/")
}

// Engine is for sqlonce's own packages. It is nil for a nil *Driver and
// for a Driver not built by New (a zero Driver has no handle, and skipped
// New's checks), so that constructors refuse both, with an error matching
// sqlonce.ErrInvalidArgument, instead of panicking or running unchecked.
func (d *Driver) Engine() driver.Engine[*sql.Tx] {
	if d == nil || d.e.db == nil {
		return nil
	}
	if d.check != nil {
		return driver.Checked{Engine: d.e, Check: d.check, DB: d.e.db}
	}
	return d.e
}

type engine struct {
	db *sql.DB
	q  *pgsqldb.Queries
	// pq: db is lib/pq's, whose statements must run in transactions (see
	// isPQ).
	pq bool
	// schema qualifies every statement; nil: unqualified.
	schema *driver.Schema
}

// on returns what the generated queries run on for tx: the handle, in
// autocommit, for driver.AutoTx.
func (e engine) on(tx *sql.Tx) pgsqldb.DBTX { return e.schema.SQLOn(driver.On(tx, e.db)) }

var _ driver.Autocommitter[*sql.Tx] = engine{}

// Autocommit runs fn's statements on the driver's *sql.DB outside any
// transaction, each committed on its own (fn gets driver.AutoTx): a
// lease's Claim, Complete, Release and Extend, and token.Issue, take one
// round trip each instead of a transaction's three. Through lib/pq it
// returns driver.ErrNoRun: they run in a transaction (see isPQ).
func (e engine) Autocommit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if e.pq {
		return driver.ErrNoRun
	}
	return driver.SQLAutocommit(ctx, fn)
}

// Guard runs fn under a savepoint whether or not fn is one statement:
// any failed statement aborts a PostgreSQL transaction, and ROLLBACK TO
// SAVEPOINT is what keeps tx usable after it. The rollback releases the
// savepoint in the same round trip. After a success the savepoint is left
// for COMMIT to release if it is the first Guard left open in tx, saving a
// round trip; a later one is released, so that savepoints never nest
// (see driver.OpenSavepoints).
func (e engine) Guard(ctx context.Context, tx *sql.Tx, _ bool, fn func(ctx context.Context) error) error {
	name := driver.SavepointName()
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		// No arguments: pgx's stdlib and lib/pq send one Query message,
		// two statements.
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name+"; RELEASE SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if openSavepoints.LeaveOpen(tx) {
		return nil
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
	return err
}

// openSavepoints are the transactions in which Guard left a savepoint
// open, whichever Driver's.
var openSavepoints driver.OpenSavepoints

func (engine) IsDuplicate(err error, constraint string) bool {
	return uniqueViolation(err, constraint)
}

func pgNow(t time.Time) sql.NullTime {
	if t.IsZero() {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: t, Valid: true}
}

func (e engine) Claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (_ driver.Claim, err error) {
	defer func() { err = canceled(ctx, err) }()
	if p.LockWait > 0 {
		return driver.PastOtherLocks(ctx, p.LockWait, lockElsewhere, func() (driver.Claim, error) { return e.claimBounded(ctx, tx, p) })
	}
	return e.claim(ctx, tx, p)
}

// claimBounded runs the claim under a savepoint with lock_timeout set, so
// that a claim that gives up waiting leaves tx usable and its lock_timeout
// as it was.
func (e engine) claimBounded(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	// Statements without arguments go in one Query message, as many as
	// they are (pgx's stdlib and lib/pq alike): the savepoint and the
	// bounded lock_timeout travel together, the replaced value kept in the
	// transaction-local setting sqlonce.lock_timeout, and so do its restore
	// and the RELEASE after the claim: three round trips, not five. The
	// timeout is a number of milliseconds, written into the statement.
	name := driver.SavepointName()
	ms := strconv.FormatInt(max(p.LockWait.Milliseconds(), 1), 10)
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name+"; SELECT set_config('sqlonce.lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', '"+ms+"ms', true)"); err != nil {
		return driver.Claim{}, err
	}
	c, err := e.claim(ctx, tx, p)
	if err != nil {
		// The rollback restores lock_timeout too.
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name+"; RELEASE SAVEPOINT "+name); rbErr != nil {
			return driver.Claim{}, driver.NotRestored(err, rbErr)
		}
		return driver.Claim{}, err
	}
	if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', current_setting('sqlonce.lock_timeout'), true); RELEASE SAVEPOINT "+name); err != nil {
		return driver.Claim{}, err
	}
	return c, nil
}

// claimAttempts bounds the loop for a key that vanishes (purged) between the
// claim that found it and the read of it.
const claimAttempts = 3

func (e engine) claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	ins := pgsqldb.KeyClaimParams{
		Namespace:      int16(p.Namespace),
		Scope:          p.Scope,
		IdempotencyKey: p.Key.Key,
		Fingerprint:    driver.NonNil(p.Fingerprint),
		State:          driver.StateDone,
		Now:            pgNow(p.Now),
		TtlUs:          p.TTL.Microseconds(),
	}
	if p.Lease > 0 {
		ins.State = driver.StateLeased
		ins.LeaseUs = sql.NullInt64{Int64: p.Lease.Microseconds(), Valid: true}
		ins.TtlUs = max(p.TTL, p.Lease).Microseconds() // keeps locked_until <= expires_at
	}
	for range claimAttempts {
		c, err := e.q.KeyClaim(ctx, e.on(tx), ins)
		switch {
		case err == nil && c.Inserted:
			return driver.Claim{Won: true, Token: c.Token}, nil
		case err == nil && !c.Available:
			return driver.Claim{Existing: driver.Existing{Fingerprint: c.Fingerprint, Response: c.Response, Leased: c.Locked}}, nil
		case err == nil:
			// Expired or lapsed: take it over below.
		case !errors.Is(err, sql.ErrNoRows):
			return driver.Claim{}, err
		default:
			// The key was committed while the insert waited, after this
			// statement's snapshot: read it with a new one.
			row, err := e.q.KeyGet(ctx, e.on(tx), pgsqldb.KeyGetParams{Now: ins.Now, Namespace: ins.Namespace, Scope: ins.Scope, IdempotencyKey: ins.IdempotencyKey})
			if errors.Is(err, sql.ErrNoRows) {
				continue // purged since the insert saw it: insert again
			}
			if err != nil {
				return driver.Claim{}, err
			}
			if !row.Available {
				return driver.Claim{Existing: driver.Existing{Fingerprint: row.Fingerprint, Response: row.Response, Leased: row.Locked}}, nil
			}
		}
		token, err := e.q.KeyTakeover(ctx, e.on(tx), pgsqldb.KeyTakeoverParams{
			Fingerprint: ins.Fingerprint, State: ins.State, Now: ins.Now, LeaseUs: ins.LeaseUs, TtlUs: ins.TtlUs,
			Namespace: ins.Namespace, Scope: p.Scope, IdempotencyKey: p.Key.Key,
		})
		if err == nil {
			return driver.Claim{Won: true, Token: token, Takeover: true}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return driver.Claim{}, err
		}
		// A concurrent takeover won: claim again.
	}
	return driver.Claim{}, fmt.Errorf("%w: key changed %d times while being claimed", sqlonce.ErrStaleRead, claimAttempts)
}

func (e engine) SetResponse(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte) (err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeySetResponse(ctx, e.on(tx), pgsqldb.KeySetResponseParams{
		Response: response, Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%w: the claim to record a response on is gone", sqlonce.ErrLeaseLost)
	}
	return nil
}

func (e engine) Unclaim(ctx context.Context, tx *sql.Tx, k driver.Key, token int64) (err error) {
	defer func() { err = canceled(ctx, err) }()
	_, err = e.q.KeyDelete(ctx, e.on(tx), pgsqldb.KeyDeleteParams{Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token})
	return err
}

func (e engine) Complete(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte, ttl time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyComplete(ctx, e.on(tx), pgsqldb.KeyCompleteParams{
		Response: driver.NonNil(response), Now: pgNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Release(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyRelease(ctx, e.on(tx), pgsqldb.KeyReleaseParams{
		Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Extend(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, lease time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyExtend(ctx, e.on(tx), pgsqldb.KeyExtendParams{
		Now: pgNow(now), LeaseUs: lease.Microseconds(), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Inspect(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (_ driver.KeyInfo, _ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.KeyInspect(ctx, e.on(tx), pgsqldb.KeyInspectParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.KeyInfo{}, false, nil
	}
	if err != nil {
		return driver.KeyInfo{}, false, err
	}
	return driver.KeyInfo{
		State: r.State, Token: r.Token, FingerprintLen: r.FingerprintLen, ResponseLen: r.ResponseLen, HasResponse: r.HasResponse,
		Leased: r.Leased, Expired: r.Expired,
		Created: driver.Micros(r.CreatedUs), Expires: driver.Micros(r.ExpiresUs), LockedUntil: driver.Micros(r.LockedUntilUs),
	}, true, nil
}

func (e engine) Forget(ctx context.Context, tx *sql.Tx, k driver.Key, force bool, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyForget(ctx, e.on(tx), pgsqldb.KeyForgetParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, ForceHeld: force})
	return n == 1, err
}

func (e engine) Purge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (_ int64, err error) {
	defer func() { err = canceled(ctx, err) }()
	return e.q.KeyPurge(ctx, e.on(tx), pgsqldb.KeyPurgeParams{Now: pgNow(now), MaxRows: int32(limit)})
}

// readCommitted begins every transaction sqlonce runs itself: sqlonce's
// own statements rely on constraints and row locks, never on a snapshot,
// and a stricter level would only add serialization failures.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

func (e engine) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	defer func() { err = canceled(ctx, err) }()
	tx, err := e.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(ctx, tx); err != nil {
		return err
	}
	live := ctx.Err() == nil
	return driver.CommitError(tx.Commit(), live)
}
