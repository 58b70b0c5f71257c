package pgxdriver

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Beginner starts transactions: *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Driver is the PostgreSQL driver. It holds no state of its own besides
// its database handle, and is safe for concurrent use.
// Build it with New: every strategy refuses a zero Driver with an error
// matching sqlonce.ErrInvalidArgument.
type Driver struct {
	e engine
}

var _ sqlonce.Driver[pgx.Tx] = (*Driver)(nil)

// New returns a driver on db, a *pgxpool.Pool or a *pgx.Conn: the handle
// on which the calls that take no transaction of yours (Store.Run, leases,
// RunSteps, Inspect, Forget, purge, token.Issue, inbox.Handle...) run
// transactions, or autocommit statements, of their own; a call given your
// pgx.Tx runs in it.
//
// A nil db (or a nil *pgxpool.Pool), a pgx.Tx, a nil Option or an invalid
// one is an error matching sqlonce.ErrInvalidArgument, naming the option.
// A pgx.Tx satisfies Beginner, but the driver's own transactions would be
// savepoints in it: a lease no other instance sees until the caller
// commits, a FirstRun for work the caller may still roll back.
func New(db Beginner, opts ...Option) (*Driver, error) {
	if db == nil || isNilPointer(db) {
		return nil, fmt.Errorf("%w: pgxdriver: nil database handle", sqlonce.ErrInvalidArgument)
	}
	if _, ok := db.(pgx.Tx); ok {
		return nil, fmt.Errorf("%w: pgxdriver: the handle is a transaction (%T), whose commit is the caller's: pass the *pgxpool.Pool or a *pgx.Conn, and your pgx.Tx to the calls that take one", sqlonce.ErrInvalidArgument, db)
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: pgxdriver: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Driver{e: engine{db: db, q: pgdb.New(), schema: o.schema}}, nil
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
			return fmt.Errorf("%w: pgxdriver: WithSchema: %v", sqlonce.ErrInvalidArgument, err)
		}
		o.schema = s
		return nil
	}
}

// Engine is for sqlonce's own packages. It is nil for a nil *Driver and
// for a Driver not built by New (a zero Driver has no handle, and skipped
// New's checks), so that constructors refuse both, with an error matching
// sqlonce.ErrInvalidArgument, instead of panicking or running unchecked.
func (d *Driver) Engine() driver.Engine[pgx.Tx] {
	if d == nil || d.e.db == nil {
		return nil
	}
	return d.e
}

type engine struct {
	db Beginner
	q  *pgdb.Queries
	// schema qualifies every statement (WithSchema); nil: unqualified.
	schema *driver.Schema
}

// on returns what the generated queries run on for db (a transaction, a
// pipeline): db itself, or db qualifying every statement by the schema.
func (e engine) on(db pgdb.DBTX) pgdb.DBTX {
	if e.schema == nil {
		return db
	}
	return qualified{db, e.schema}
}

// qualified runs the generated queries on db with sqlonce's tables
// qualified by s.
type qualified struct {
	db pgdb.DBTX
	s  *driver.Schema
}

func (q qualified) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return q.db.Exec(ctx, q.s.Qualify(sql), args...)
}

func (q qualified) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return q.db.Query(ctx, q.s.Qualify(sql), args...)
}

func (q qualified) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return q.db.QueryRow(ctx, q.s.Qualify(sql), args...)
}

func (q qualified) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, qq := range b.QueuedQueries {
		qq.SQL = q.s.Qualify(qq.SQL)
	}
	return q.db.SendBatch(ctx, b)
}

// Guard runs fn under a savepoint whether or not fn is one statement:
// any failed statement aborts a PostgreSQL transaction, and ROLLBACK TO
// SAVEPOINT is what keeps tx usable after it. The rollback releases the
// savepoint in the same round trip. After a success the savepoint is left
// for COMMIT to release if it is the first Guard left open in tx, saving a
// round trip; a later one is released, so that savepoints never nest
// (see driver.OpenSavepoints).
func (e engine) Guard(ctx context.Context, tx pgx.Tx, _ bool, fn func(ctx context.Context) error) error {
	name := driver.SavepointName()
	if _, err := tx.Exec(ctx, "SAVEPOINT "+name); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		// No arguments: one Query message, two statements.
		if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+name+"; RELEASE SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if leaveOpen(tx) {
		return nil
	}
	_, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+name)
	return err
}

// openSavepoint is the key in a connection's pgconn.CustomData of the
// transaction that holds a savepoint Guard left open.
const openSavepoint = "sqlonce.open_savepoint"

// leaveOpen reports whether Guard may leave its savepoint in tx open: the
// first time for tx on its connection, which it then notes, and never for
// a transaction it cannot tell apart from another (one whose type cannot
// be compared, or without a connection).
func leaveOpen(tx pgx.Tx) bool {
	if t := reflect.TypeOf(tx); t == nil || !t.Comparable() {
		return false
	}
	c := tx.Conn()
	if c == nil || c.PgConn() == nil {
		return false
	}
	data := c.PgConn().CustomData()
	if data == nil {
		return false
	}
	if held, ok := data[openSavepoint]; ok && held == any(tx) {
		return false
	}
	data[openSavepoint] = tx
	return true
}

// savepoint runs fn under a savepoint, released after a success and left
// after ROLLBACK TO: pgx runs a nested Begin as SAVEPOINT and its Rollback
// as ROLLBACK TO SAVEPOINT.
func savepoint(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context) error) error {
	// Not pgx's nested Tx: its Rollback leaves the savepoint open (ROLLBACK
	// TO keeps it), a subtransaction behind each fn that failed.
	const name = "sqlonce_steps"
	if _, err := tx.Exec(ctx, "savepoint "+name); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		if _, rbErr := tx.Exec(ctx, "rollback to savepoint "+name+"; release savepoint "+name); rbErr != nil {
			return driver.NotRestored(err, rbErr)
		}
		return err
	}
	_, err := tx.Exec(ctx, "release savepoint "+name)
	return err
}

func (engine) IsDuplicate(err error, constraint string) bool {
	return uniqueViolation(err, constraint)
}

func pgNow(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

func (e engine) Claim(ctx context.Context, tx pgx.Tx, p driver.ClaimParams) (driver.Claim, error) {
	if p.LockWait > 0 {
		return driver.PastOtherLocks(ctx, p.LockWait, lockElsewhere, func() (driver.Claim, error) { return e.claimBounded(ctx, tx, p) })
	}
	return e.claim(ctx, tx, p)
}

// claimBounded runs the claim under a savepoint with lock_timeout set, so
// that a claim that gives up waiting leaves tx usable and its lock_timeout
// as it was. The savepoint, the setting, the claim, the restore and the
// release travel in one round trip; a claim that gave up takes one more,
// to roll back to the savepoint. Where the claim alone does not decide (a
// key committed while it waited, or free to take over), claimBoundedSteps
// claims again, a statement at a time.
func (e engine) claimBounded(ctx context.Context, tx pgx.Tx, p driver.ClaimParams) (driver.Claim, error) {
	// One name for every claim: PostgreSQL stacks savepoints of the same
	// name (RELEASE and ROLLBACK TO take the latest), and a statement of
	// the same text is one of pgx's cached statements, where a new name
	// each time would cost a round trip to prepare it.
	const name = "sqlonce_claim"
	var (
		pl    pipeline
		c     pgdb.KeyClaimRow
		found bool
	)
	pl.exec("savepoint " + name)
	e.boundedClaim(ctx, &pl, claimParams(p), p.LockWait, &c, &found)
	pl.exec("release savepoint " + name)
	if err := pl.send(ctx, tx); err != nil {
		// ROLLBACK TO keeps the savepoint: RELEASE ends it, in the same
		// round trip (no arguments: the simple protocol, both statements
		// in one message), so that a claim given up leaves no
		// subtransaction behind.
		if _, rbErr := tx.Exec(ctx, "rollback to savepoint "+name+"; release savepoint "+name); rbErr != nil {
			return driver.Claim{}, driver.NotRestored(err, rbErr)
		}
		return driver.Claim{}, err
	}
	if cl, ok := decided(c, found); ok {
		return cl, nil
	}
	return e.claimBoundedSteps(ctx, tx, p)
}

// savedLockTimeout is the transaction-local setting LockTimeoutPush keeps
// the replaced lock_timeout in.
const savedLockTimeout = "sqlonce.lock_timeout"

// boundedClaim queues on pl the claim of ins, with lock waits bounded by
// wait (if positive) and lock_timeout restored after it; its row lands in
// c (found false: none came back) when pl is sent.
func (e engine) boundedClaim(ctx context.Context, pl *pipeline, ins pgdb.KeyClaimParams, wait time.Duration, c *pgdb.KeyClaimRow, found *bool) {
	if wait > 0 {
		ms := max(wait.Milliseconds(), 1)
		pl.thenExec(e.q.LockTimeoutPush(ctx, e.on(pl), []pgdb.LockTimeoutPushParams{{SaveIn: savedLockTimeout, Value: strconv.FormatInt(ms, 10) + "ms"}}))
	}
	r := e.q.KeyClaim(ctx, e.on(pl), []pgdb.KeyClaimParams{ins})
	pl.then(func() (err error) {
		r.QueryRow(func(_ int, row pgdb.KeyClaimRow, rowErr error) {
			switch {
			case rowErr == nil:
				*c, *found = row, true
			case !errors.Is(rowErr, pgx.ErrNoRows):
				err = rowErr
			}
		})
		return err
	})
	if wait > 0 {
		pl.thenExec(e.q.LockTimeoutPop(ctx, e.on(pl), []string{savedLockTimeout}))
	}
}

// decided returns the claim a KeyClaim row decides on its own: the key
// inserted, or held by someone else. Not ok: no row came back (the key was
// committed while the insert waited), or the key is free to take over.
func decided(c pgdb.KeyClaimRow, found bool) (driver.Claim, bool) {
	switch {
	case found && c.Inserted:
		return driver.Claim{Won: true, Token: c.Token}, true
	case found && !c.Available:
		return driver.Claim{Existing: driver.Existing{Fingerprint: c.Fingerprint, Response: c.Response, Leased: c.Locked}}, true
	}
	return driver.Claim{}, false
}

// claimBoundedSteps is claimBounded a statement at a time, for the claims
// that need more than the claim statement.
func (e engine) claimBoundedSteps(ctx context.Context, tx pgx.Tx, p driver.ClaimParams) (driver.Claim, error) {
	var c driver.Claim
	err := savepoint(ctx, tx, func(ctx context.Context) error {
		ms := max(p.LockWait.Milliseconds(), 1)
		prev, err := e.q.LockTimeoutSet(ctx, e.on(tx), strconv.FormatInt(ms, 10)+"ms")
		if err != nil {
			return err
		}
		c, err = e.claim(ctx, tx, p)
		if err != nil {
			return err
		}
		_, err = e.q.LockTimeoutSet(ctx, e.on(tx), prev.Previous)
		return err
	})
	return c, err
}

// claimAttempts bounds the loop for a key that vanishes (purged) between the
// claim that found it and the read of it.
const claimAttempts = 3

// claimParams are the KeyClaim parameters of p.
func claimParams(p driver.ClaimParams) pgdb.KeyClaimParams {
	ins := pgdb.KeyClaimParams{
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
		ins.LeaseUs = pgtype.Int8{Int64: p.Lease.Microseconds(), Valid: true}
		ins.TtlUs = max(p.TTL, p.Lease).Microseconds() // keeps locked_until <= expires_at
	}
	return ins
}

// claimOnce runs ins's KeyClaim in tx: pgx.ErrNoRows when no row came back.
func (e engine) claimOnce(ctx context.Context, tx pgx.Tx, ins pgdb.KeyClaimParams) (c pgdb.KeyClaimRow, err error) {
	e.q.KeyClaim(ctx, e.on(tx), []pgdb.KeyClaimParams{ins}).QueryRow(func(_ int, row pgdb.KeyClaimRow, rowErr error) { c, err = row, rowErr })
	return c, err
}

func (e engine) claim(ctx context.Context, tx pgx.Tx, p driver.ClaimParams) (driver.Claim, error) {
	ins := claimParams(p)
	for range claimAttempts {
		c, err := e.claimOnce(ctx, tx, ins)
		switch {
		case err == nil && c.Inserted:
			return driver.Claim{Won: true, Token: c.Token}, nil
		case err == nil && !c.Available:
			return driver.Claim{Existing: driver.Existing{Fingerprint: c.Fingerprint, Response: c.Response, Leased: c.Locked}}, nil
		case err == nil:
			// Expired or lapsed: take it over below.
		case !errors.Is(err, pgx.ErrNoRows):
			return driver.Claim{}, err
		default:
			// The key was committed while the insert waited, after this
			// statement's snapshot: read it with a new one.
			if err := e.afterWait(ctx, tx, ins, &c); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					continue // purged since the insert saw it: insert again
				}
				return driver.Claim{}, err
			}
			if !c.Available {
				return driver.Claim{Existing: driver.Existing{Fingerprint: c.Fingerprint, Response: c.Response, Leased: c.Locked}}, nil
			}
		}
		token, err := e.q.KeyTakeover(ctx, e.on(tx), pgdb.KeyTakeoverParams{
			Fingerprint: ins.Fingerprint, State: ins.State, Now: ins.Now, LeaseUs: ins.LeaseUs, TtlUs: ins.TtlUs,
			Namespace: int16(p.Namespace), Scope: p.Scope, IdempotencyKey: p.Key.Key,
		})
		if err == nil {
			return driver.Claim{Won: true, Token: token, Takeover: true}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return driver.Claim{}, err
		}
		// A concurrent takeover won: claim again.
	}
	return driver.Claim{}, fmt.Errorf("%w: key changed %d times while being claimed", sqlonce.ErrStaleRead, claimAttempts)
}

// afterWait reads the key into c with a statement of its own.
func (e engine) afterWait(ctx context.Context, tx pgx.Tx, ins pgdb.KeyClaimParams, c *pgdb.KeyClaimRow) error {
	var err error
	e.q.KeyGet(ctx, e.on(tx), []pgdb.KeyGetParams{{Now: ins.Now, Namespace: ins.Namespace, Scope: ins.Scope, IdempotencyKey: ins.IdempotencyKey}}).QueryRow(func(_ int, row pgdb.KeyGetRow, rowErr error) {
		err = rowErr
		*c = pgdb.KeyClaimRow{Token: row.Token, Fingerprint: row.Fingerprint, Response: row.Response, Locked: row.Locked, Available: row.Available}
	})
	return err
}

func (e engine) SetResponse(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, response []byte) error {
	n, err := e.q.KeySetResponse(ctx, e.on(tx), pgdb.KeySetResponseParams{
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

func (e engine) Unclaim(ctx context.Context, tx pgx.Tx, k driver.Key, token int64) error {
	_, err := e.q.KeyDelete(ctx, e.on(tx), pgdb.KeyDeleteParams{Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token})
	return err
}

func (e engine) Complete(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, response []byte, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyComplete(ctx, e.on(tx), pgdb.KeyCompleteParams{
		Response: driver.NonNil(response), Now: pgNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Release(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, now time.Time) (bool, error) {
	n, err := e.q.KeyRelease(ctx, e.on(tx), pgdb.KeyReleaseParams{
		Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Extend(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, lease time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyExtend(ctx, e.on(tx), pgdb.KeyExtendParams{
		Now: pgNow(now), LeaseUs: lease.Microseconds(), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) Purge(ctx context.Context, tx pgx.Tx, limit int, now time.Time) (int64, error) {
	return e.q.KeyPurge(ctx, e.on(tx), pgdb.KeyPurgeParams{Now: pgNow(now), MaxRows: int32(limit)})
}

func (e engine) Inspect(ctx context.Context, tx pgx.Tx, k driver.Key, now time.Time) (driver.KeyInfo, bool, error) {
	r, err := e.q.KeyInspect(ctx, e.on(tx), pgdb.KeyInspectParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, pgx.ErrNoRows) {
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

func (e engine) Forget(ctx context.Context, tx pgx.Tx, k driver.Key, force bool, now time.Time) (bool, error) {
	n, err := e.q.KeyForget(ctx, e.on(tx), pgdb.KeyForgetParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, ForceHeld: force})
	return n == 1, err
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// txOptionsBeginner is implemented by *pgxpool.Pool and *pgx.Conn.
type txOptionsBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

func (e engine) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) (err error) {
	// READ COMMITTED whatever the server's default: sqlonce's own
	// statements rely on constraints and row locks, never on a snapshot,
	// and a stricter level would only add serialization failures.
	var tx pgx.Tx
	if b, ok := e.db.(txOptionsBeginner); ok {
		tx, err = b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	} else {
		tx, err = e.db.Begin(ctx)
	}
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		// Also on a panic in fn, which goes on. After a failed COMMIT the
		// Tx is closed and this does nothing.
		if !committed {
			_ = tx.Rollback(ctx)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	live := ctx.Err() == nil
	committed = true
	return commitError(tx.Commit(ctx), live)
}
