package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Driver is the MySQL/MariaDB driver. It is safe for concurrent use.
// Build it with New: every strategy refuses a zero Driver with an error
// matching sqlonce.ErrInvalidArgument.
type Driver struct {
	e     engine
	check *driver.DialectCheck // nil: db is known to be MySQL/MariaDB's
}

// Option configures a Driver; New applies and validates it.
type Option func(*options) error

type options struct{ database *driver.Schema }

// WithDatabase keeps sqlonce's tables in the named database (a schema, in
// MySQL's words) instead of the connection's default one: every statement
// of sqlonce's names its tables qualified (`name`.sqlonce_keys), so that
// two services sharing a server keep their keys apart while their
// connections default to their own databases. Create the tables there
// with migrations.Up and migrations.WithSchema. The name is an unquoted
// lower-case identifier (a letter or _, then letters, digits or _, at most
// 63 bytes), used as written; any other makes New return an error
// matching sqlonce.ErrInvalidArgument.
func WithDatabase(name string) Option {
	return func(o *options) error {
		s, err := driver.NewSchema(driver.MySQL, name)
		if err != nil {
			return fmt.Errorf("%w: mysqldriver: WithDatabase: %v", sqlonce.ErrInvalidArgument, err)
		}
		o.database = s
		return nil
	}
}

var _ sqlonce.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a driver on db, a *sql.DB of go-sql-driver/mysql: the
// handle on which the calls that take no transaction of yours (Store.Run,
// leases, RunSteps, purge, token.Issue, inbox.Handle...) run transactions
// of their own, and whose prepared statements, shared by every driver on
// db, serve every call. A driver holds nothing that needs closing.
//
// A nil db, a db whose database/sql driver is another database's (pgx's
// stdlib, lib/pq, a SQLite library: the error names the driver to use), a
// nil Option or an invalid one is an error matching
// sqlonce.ErrInvalidArgument. A database/sql driver it does not know (a
// wrapper such as otelsql) is accepted, and checked by a probe at the
// first call: every call then returns that error if it is not
// MySQL/MariaDB.
func New(db *sql.DB, opts ...Option) (*Driver, error) {
	check, err := driver.CheckSQLDialect(db, driver.MySQL, "mysqldriver", sqlonce.ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: mysqldriver: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	e := engine{db: db, q: mysqldb.New(), schema: o.database}
	e.stmts = cacheFor(db)
	e.wsrep = e.stmts.wsrep // shared by the drivers on db
	e.batch = e.stmts.batch
	e.shards = e.stmts.shards
	return &Driver{e: e, check: check}, nil
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
	db    *sql.DB
	q     *mysqldb.Queries
	stmts *stmtCache // nil without db: statements run unprepared
	wsrep *wsrepCheck
	// batch: the batch claim's shapes the server refused (batchjson.go).
	batch *batchShape
	// shards: through vtgate, the keyspace's shards (vtShardCache).
	shards *vtShardCache
	// schema qualifies every statement (WithDatabase); nil: unqualified.
	schema *driver.Schema
}

// Transaction control, not a query on sqlonce's tables: sqlc's MySQL engine
// parses no SET. The claim's timeout is a number of seconds written into
// the statement, which then has no arguments and takes one round trip
// whatever the DSN (with arguments, go-sql-driver/mysql prepares it first
// unless interpolateParams is set); the session's own is kept in a user
// variable by the same statement and restored from it, never read by the
// client.
const (
	sqlSaveLockWait    = "SET @sqlonce_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d"
	sqlRestoreLockWait = "SET SESSION innodb_lock_wait_timeout = @sqlonce_lock_wait"
)

// Guard runs a single statement as it is: a failed statement rolls back
// alone on InnoDB and the transaction goes on (the errors that roll all of
// it back, a deadlock, a lock wait timeout under
// innodb_rollback_on_timeout, are classified so). fn of several
// statements runs under a savepoint, which undoes all of them; after a
// success it stays for COMMIT to release: an open InnoDB savepoint is a
// name in the transaction's list, not a nested transaction (20,000 left
// open cost no more than 20,000 released).
func (e engine) Guard(ctx context.Context, tx *sql.Tx, single bool, fn func(ctx context.Context) error) error {
	if err := e.checkTx(ctx, tx); err != nil {
		return err
	}
	if single {
		return fn(ctx)
	}
	return driver.SQLSavepoint(ctx, tx, driver.ReleaseNever, fn)
}

func (engine) IsDuplicate(err error, constraint string) bool {
	return duplicate(err, constraint)
}

func myNow(t time.Time) sql.NullTime {
	if t.IsZero() {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: t.UTC(), Valid: true}
}

func (e engine) Claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return driver.Claim{}, err
	}
	if p.LockWait > 0 {
		return e.claimBounded(ctx, tx, p)
	}
	return e.claim(ctx, tx, p)
}

// claimBounded sets innodb_lock_wait_timeout for the claim and restores it:
// MySQL has no per-statement lock wait that covers INSERT, and SET STATEMENT
// is MariaDB's alone. It counts in whole seconds: below one second MariaDB
// gives up at once (0), MySQL 8 clamps to its minimum of one second.
//
// A lock wait timeout rolls back only the statement, so tx stays usable;
// unless the server runs with innodb_rollback_on_timeout=ON, where it rolls
// back the whole transaction and the error is marked ErrTxRolledBack.
//
// The setting belongs to the connection: if tx's context is cancelled
// between the claim and the restore, database/sql rolls tx back and returns
// the connection to the pool still set. Cancelled during the claim itself,
// the driver closes the connection instead.
func (e engine) claimBounded(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (c driver.Claim, err error) {
	if e.wsrep.vtgate {
		// The SET reaches the keyspace's first shard: the key's shard
		// only when the session is on one shard (a DSN whose database is
		// keyspace:shard) or the keyspace has one. The shards are
		// listed once per handle (vtShardCache), not per claim.
		targets, err := e.vtgateShards(ctx, tx)
		if err != nil {
			return c, err
		}
		if len(targets) > 1 {
			return c, errVtgateLockWait
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(sqlSaveLockWait, int64(p.LockWait/time.Second))); err != nil {
		return c, err
	}
	defer func() {
		if _, rErr := tx.ExecContext(context.WithoutCancel(ctx), sqlRestoreLockWait); rErr != nil && err == nil {
			err = rErr
		}
	}()
	c, err = e.claim(ctx, tx, p)
	if err != nil && driver.Classify(err).Has(driver.LockNotAvailable) {
		// Asked only when it matters: whether the timeout rolled back the
		// whole transaction rather than the statement.
		if prev, qErr := e.q.LockWaitTimeoutGet(context.WithoutCancel(ctx), e.on(tx)); qErr == nil && prev.RollbackOnTimeout == 1 {
			err = fmt.Errorf("%w (innodb_rollback_on_timeout=ON): %w", driver.ErrTxRolledBack, err)
		}
	}
	return c, err
}

const claimAttempts = 3

func (e engine) claim(ctx context.Context, tx *sql.Tx, p driver.ClaimParams) (driver.Claim, error) {
	now := myNow(p.Now)
	ns, scope, key := int16(p.Namespace), []byte(p.Scope), []byte(p.Key.Key)
	state := driver.StateDone
	var lease any
	ttl := p.TTL
	if p.Lease > 0 {
		state = driver.StateLeased
		lease = p.Lease.Microseconds()
		ttl = max(ttl, p.Lease) // keeps locked_until <= expires_at
	}
	fp := driver.NonNil(p.Fingerprint)
	for range claimAttempts {
		// An in-transaction claim names its row with a nonce below any
		// clock-based token, so that Unclaim and SetResponse can never touch
		// a row another transaction committed (see KeyDelete).
		var nonce sql.NullInt64
		if p.Lease <= 0 {
			nonce = sql.NullInt64{Int64: 1 + rand.Int64N(1<<40), Valid: true}
		}
		var res sql.Result
		var err error
		if nonce.Valid && e.wsrep.vtgate {
			// Through vtgate, no LAST_INSERT_ID(x) in the caller's
			// transaction. For such a statement vtgate has the tablet
			// fetch the last insert id, and vttablet (v0.24) first resets
			// the session's LAST_INSERT_ID on the transaction's MySQL
			// connection with a statement that, on a connection error,
			// reconnects and runs again: when that connection was killed
			// (a KILL, a lost connection, a MySQL restart) the
			// transaction is gone, and this claim and every statement
			// after it run on the new connection in autocommit, each
			// committing alone, without an error to anyone; COMMIT
			// answers OK. A batch's claims made before the kill were
			// lost, those after it and the work committed. Without
			// LAST_INSERT_ID the claim fails on the killed connection
			// (2013 or 2006, then 1317 "transaction ... ended").
			err = e.q.KeyInsertNonce(ctx, e.on(tx), mysqldb.KeyInsertNonceParams{
				Namespace: ns, Scope: scope, IdempotencyKey: key, Fingerprint: fp, State: state, Token: nonce.Int64,
				Now: now, TtlUs: ttl.Microseconds(),
			})
		} else {
			res, err = e.q.KeyInsert(ctx, e.on(tx), mysqldb.KeyInsertParams{
				Namespace: ns, Scope: scope, IdempotencyKey: key, Fingerprint: fp, State: state, Token: nonce,
				Now: now, LeaseUs: lease, TtlUs: ttl.Microseconds(),
			})
		}
		if err == nil && nonce.Valid {
			return driver.Claim{Won: true, Token: nonce.Int64}, nil
		}
		if err == nil {
			// A lease, whose token the database's clock gave: no RETURNING
			// on MySQL, but LAST_INSERT_ID(token) in the INSERT answers it.
			token, err := res.LastInsertId()
			if err != nil {
				return driver.Claim{}, err
			}
			return driver.Claim{Won: true, Token: token}, nil
		}
		if !duplicate(err, "PRIMARY") {
			return driver.Claim{}, err
		}
		// The failed INSERT left a shared lock on the existing row; a locking
		// read sees it even where the snapshot (REPEATABLE READ) does not.
		row, err := e.q.KeyGetLocked(ctx, e.on(tx), mysqldb.KeyGetLockedParams{Now: now, Namespace: ns, Scope: scope, IdempotencyKey: key})
		if errors.Is(err, sql.ErrNoRows) {
			continue // purged since the insert saw it: claim again
		}
		if err != nil {
			return driver.Claim{}, err
		}
		if row.Available == 1 {
			n, err := e.q.KeyTakeover(ctx, e.on(tx), mysqldb.KeyTakeoverParams{
				Fingerprint: fp, State: state, NextToken: row.NextToken, Now: now,
				LeaseUs: lease, TtlUs: ttl.Microseconds(),
				Namespace: ns, Scope: scope, IdempotencyKey: key, Token: row.Token,
			})
			if err != nil {
				return driver.Claim{}, err
			}
			if n == 1 {
				return driver.Claim{Won: true, Token: row.NextToken, Takeover: true}, nil
			}
			continue
		}
		return driver.Claim{Existing: driver.Existing{
			Fingerprint: row.Fingerprint,
			Response:    row.Response,
			Leased:      row.Locked == 1,
		}}, nil
	}
	return driver.Claim{}, fmt.Errorf("%w: key changed %d times while being claimed", sqlonce.ErrStaleRead, claimAttempts)
}

// responsePiece is the most of a response SetResponse sends in one
// statement. go-sql-driver sizes its packets by its own maxAllowedPacket
// (64 MiB unless the DSN says otherwise), not the server's: a statement
// over the server's max_allowed_packet (16 MiB by default on MariaDB) is
// refused and the connection dropped. Pieces of 1 MiB fit every server's
// default, so a response up to dedupe.MaxResponseSize can be recorded.
const responsePiece = 1 << 20

func (e engine) SetResponse(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte) error {
	// The token check keeps a transaction that a deadlock rolled back (its
	// next statement runs in autocommit) off another transaction's row.
	ns, scope, key := int16(k.Namespace), []byte(k.Scope), []byte(k.Key)
	n, err := e.q.KeySetResponse(ctx, e.on(tx), mysqldb.KeySetResponseParams{
		Response: driver.NonNil(response[:min(len(response), responsePiece)]), Namespace: ns, Scope: scope, IdempotencyKey: key, Token: token,
	})
	if err != nil {
		return err
	}
	if n != 1 { // NULL to a value always counts as a change
		if e.wsrep.done.Load() && e.wsrep.vtgate {
			// The claim was made in tx: vtgate rolled tx back under the work.
			return fmt.Errorf("%w: the claim to record a response on is gone: %w", sqlonce.ErrLeaseLost, errVtgateClaimGone)
		}
		return fmt.Errorf("%w: the claim to record a response on is gone", sqlonce.ErrLeaseLost)
	}
	return e.appendRest(ctx, tx, ns, scope, key, token, response)
}

// appendRest appends response[responsePiece:] to the row's response, which
// holds the first piece, in pieces that each fit the server's packet limit
// (go-sql-driver assumes 64 MiB, MariaDB's default is 16 MiB), and checks
// the stored length. The row must be locked by tx.
func (e engine) appendRest(ctx context.Context, tx *sql.Tx, ns int16, scope, key []byte, token int64, response []byte) error {
	if len(response) <= responsePiece {
		return nil
	}
	tooLarge := fmt.Errorf("%w: %d bytes do not fit the server's max_allowed_packet", sqlonce.ErrResponseTooLarge, len(response))
	for at := responsePiece; at < len(response); at += responsePiece {
		n, err := e.q.KeyAppendResponse(ctx, e.on(tx), mysqldb.KeyAppendResponseParams{
			Piece: response[at:min(at+responsePiece, len(response))], Namespace: ns, Scope: scope, IdempotencyKey: key, Token: token, PrefixLen: int64(at),
		})
		if err != nil {
			return err
		}
		if n != 1 {
			return tooLarge
		}
	}
	stored, err := e.q.KeyResponseLength(ctx, e.on(tx), mysqldb.KeyResponseLengthParams{Namespace: ns, Scope: scope, IdempotencyKey: key})
	if err != nil {
		return err
	}
	if stored != int64(len(response)) {
		return tooLarge
	}
	return nil
}

func (e engine) Unclaim(ctx context.Context, tx *sql.Tx, k driver.Key, token int64) error {
	_, err := e.q.KeyDelete(ctx, e.on(tx), mysqldb.KeyDeleteParams{Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token})
	return err
}

func (e engine) Complete(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, response []byte, ttl time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	if tx == driver.AutoTx && len(response) > responsePiece {
		// Its pieces must commit together: in a transaction.
		return false, driver.ErrNoRun
	}
	if err := e.vtgateInTx(ctx, tx); err != nil {
		return false, err
	}
	ns, scope, key := int16(k.Namespace), []byte(k.Scope), []byte(k.Key)
	n, err := e.q.KeyComplete(ctx, e.on(tx), mysqldb.KeyCompleteParams{
		Response: driver.NonNil(response[:min(len(response), responsePiece)]), Now: myNow(now), TtlUs: ttl.Microseconds(),
		Namespace: ns, Scope: scope, IdempotencyKey: key, Token: token,
	})
	if err != nil || n != 1 {
		return false, err
	}
	// The completed row is locked by tx; a failure here rolls it back with
	// tx, leaving the lease held.
	return true, e.appendRest(ctx, tx, ns, scope, key, token, response)
}

func (e engine) Release(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyRelease(ctx, e.on(tx), mysqldb.KeyReleaseParams{
		Now: myNow(now), Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	return n == 1, err
}

func (e engine) Extend(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, lease time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	ns, scope, key := int16(k.Namespace), []byte(k.Scope), []byte(k.Key)
	n, err := e.q.KeyExtend(ctx, e.on(tx), mysqldb.KeyExtendParams{
		Now: myNow(now), LeaseUs: lease.Microseconds(),
		Namespace: ns, Scope: scope, IdempotencyKey: key, Token: token,
	})
	if err != nil || n == 1 {
		return n == 1, err
	}
	// No row changed: lost, or held with the deadline already where asked.
	held, err := e.q.KeyLeaseHeld(ctx, e.on(tx), mysqldb.KeyLeaseHeldParams{Namespace: ns, Scope: scope, IdempotencyKey: key, Token: token})
	return held == 1, err
}

func (e engine) Inspect(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (driver.KeyInfo, bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return driver.KeyInfo{}, false, err
	}
	r, err := e.q.KeyInspect(ctx, e.on(tx), mysqldb.KeyInspectParams{Now: myNow(now), Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key)})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.KeyInfo{}, false, nil
	}
	if err != nil {
		return driver.KeyInfo{}, false, err
	}
	return driver.KeyInfo{
		State: r.State, Token: r.Token, FingerprintLen: r.FingerprintLen, ResponseLen: r.ResponseLen, HasResponse: r.HasResponse == 1,
		Leased: r.Leased == 1, Expired: r.Expired == 1,
		Created: driver.Micros(r.CreatedUs), Expires: driver.Micros(r.ExpiresUs), LockedUntil: driver.Micros(r.LockedUntilUs),
	}, true, nil
}

func (e engine) Forget(ctx context.Context, tx *sql.Tx, k driver.Key, force bool, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyForget(ctx, e.on(tx), mysqldb.KeyForgetParams{Now: myNow(now), Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), ForceHeld: force})
	return n == 1, err
}

var _ driver.Autocommitter[*sql.Tx] = engine{}

// Autocommit runs fn's statements on the driver's *sql.DB outside any
// transaction, each committed on its own (fn gets driver.AutoTx): a
// lease's Claim, Complete, Release and Extend, and token.Issue, take one
// round trip each instead of a transaction's three. A Complete whose
// response takes more than one statement answers driver.ErrNoRun, and
// runs in a transaction; so does every call on a Galera node whose
// wsrep_sync_wait makes reads wait but not writes (bit 2 unset, as with
// wsrep_sync_wait=1): a BEGIN waits there, an UPDATE alone does not.
func (e engine) Autocommit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := e.checkTx(ctx, nil); err != nil {
		return err
	}
	if !e.wsrep.done.Load() || e.wsrep.inTx {
		// Undecided (the probe could not answer), or a Galera node whose
		// writes do not wait for what other nodes committed.
		return driver.ErrNoRun
	}
	return driver.SQLAutocommit(ctx, fn)
}

func (e engine) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := e.checkTx(ctx, nil); err != nil {
		return err
	}
	// The server's default isolation level, not READ COMMITTED although
	// sqlonce's own statements need no snapshot: with binlog_format=STATEMENT
	// the server refuses writes at READ COMMITTED (error 1665). The deadlocks
	// REPEATABLE READ's gap locks bring are retried by the caller (dedupe).
	if e.wsrep.vtgate {
		// A purge asked in this transaction may run shard by shard
		// outside it (see vtgatePurge).
		inner := fn
		fn = func(ctx context.Context, tx *sql.Tx) error { return inner(context.WithValue(ctx, ownTxKey{}, tx), tx) }
	}
	return driver.SQLInTx(ctx, e.db, fn)
}
