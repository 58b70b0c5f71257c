package driver

import (
	"context"
	"errors"
	"time"
)

// Key state values stored in sqlonce_keys.state.
const (
	StateDone   int16 = 1
	StateLeased int16 = 2
)

// NotBuilt is why the strategies' constructors refuse a nil driver, or a
// zero Driver of a driver package (new(pgxdriver.Driver)), whose Engine is
// nil: only its package's New checks and keeps the database handle.
const NotBuilt = "nil driver, or a Driver not built by its package's New: build it with pgxdriver.New, pgsqldriver.New, mysqldriver.New or sqlitedriver.New"

// Engine is implemented by every driver.
type Engine[TTx any] interface {
	// Guard runs fn, unique's insert, so that an error from fn leaves tx
	// usable and nothing fn wrote remains; unique judges the error after.
	// single says that fn runs exactly one statement: where a failed
	// statement rolls back alone and the transaction goes on (MySQL,
	// SQLite), Guard then runs fn as it is. Otherwise fn runs under a
	// savepoint, rolled back to when fn fails. After fn succeeded the
	// engine may leave the savepoint for COMMIT to release, where that
	// costs nothing (MySQL) or nests no savepoints (PostgreSQL: at most
	// one left open per transaction).
	Guard(ctx context.Context, tx TTx, single bool, fn func(ctx context.Context) error) error

	// IsDuplicate reports whether err is a duplicate-key error on the named
	// constraint (PostgreSQL) or key (MySQL).
	IsDuplicate(err error, constraint string) bool

	// Claim claims a key in tx. See ClaimParams and Claim.
	Claim(ctx context.Context, tx TTx, p ClaimParams) (Claim, error)
	// SetResponse records the response of a claim made in tx.
	SetResponse(ctx context.Context, tx TTx, k Key, token int64, response []byte) error
	// Unclaim deletes a claim made in tx whose work failed.
	Unclaim(ctx context.Context, tx TTx, k Key, token int64) error

	// Complete, Release and Extend act on a lease held with token. They
	// report whether the lease was still held (false: lost).
	Complete(ctx context.Context, tx TTx, k Key, token int64, response []byte, ttl time.Duration, now time.Time) (bool, error)
	Release(ctx context.Context, tx TTx, k Key, token int64, now time.Time) (bool, error)
	Extend(ctx context.Context, tx TTx, k Key, token int64, lease time.Duration, now time.Time) (bool, error)

	// Purge deletes up to limit expired keys and reports how many.
	Purge(ctx context.Context, tx TTx, limit int, now time.Time) (int64, error)

	// Inspect reads k as of now (the database's when zero); ok is false
	// when there is no row.
	Inspect(ctx context.Context, tx TTx, k Key, now time.Time) (info KeyInfo, ok bool, err error)
	// Forget deletes k, unless a lease on it still holds as of now and
	// force is false, and reports whether it deleted a row.
	Forget(ctx context.Context, tx TTx, k Key, force bool, now time.Time) (bool, error)

	// InTx runs fn in a transaction of its own on the driver's database
	// handle, committing when fn returns nil.
	InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error

	// Capabilities lists the optional interfaces the engine implements.
	// It is cheap to call, but allocates: callers keep the value.
	Capabilities() Capabilities[TTx]

	Tokens[TTx]
	Steps[TTx]
	Outbox[TTx]
}

// DuplicateInTx is implemented by engines that need the transaction to
// tell which constraint a duplicate-key error is on: SQLite names the
// columns, not the constraint, so the name is looked up in the schema. It
// is called after Guard has rolled the failed insert back, with tx usable.
// Callers use it in place of IsDuplicate when the engine has it. An error
// means the lookup failed (ctx ended, the connection was lost): the
// duplicate cannot be judged, and must be reported as neither AlreadyDone
// nor the raw duplicate.
type DuplicateInTx[TTx any] interface {
	IsDuplicateInTx(ctx context.Context, tx TTx, err error, constraint string) (bool, error)
}

// ErrTxRolledBack is wrapped by a Claim error after which the server has
// rolled back the whole transaction, not just the claim: a lock wait
// timeout on MySQL/MariaDB running with innodb_rollback_on_timeout=ON.
var ErrTxRolledBack = errors.New("the server rolled the transaction back")

// Namespace is sqlonce_keys.namespace: it keeps the keys of each package
// built on the table apart, so that a scope and key of one can never
// answer for another's.
type Namespace int16

// The namespaces. Values are stored: never renumber them.
const (
	// NamespaceDedupe holds the keys of dedupe Stores made with dedupe.New.
	NamespaceDedupe Namespace = 0
	// NamespaceInbox holds inbox message ids, scoped by consumer name.
	NamespaceInbox Namespace = 1
	// NamespaceHTTP holds httpidem request keys.
	NamespaceHTTP Namespace = 2
	// NamespaceElection holds the leases that elect one instance among
	// many: dedupe's Store.PurgeEvery (one row, never purged) and
	// Store.ResumeEvery.
	NamespaceElection Namespace = 3
	// NamespaceSteps holds the keys of dedupe's operations of several
	// steps (Store.RunSteps). While such a key is leased, its response
	// column holds the operation's recovery point, not a response.
	NamespaceSteps Namespace = 4
	// NamespaceHTTPSteps holds the keys of httpidem requests run as
	// operations of several steps (Middleware.Steps), as NamespaceSteps
	// holds dedupe's.
	NamespaceHTTPSteps Namespace = 5
)

// Key identifies a row of sqlonce_keys.
type Key struct {
	Namespace Namespace
	Scope     string
	Key       string
}

// KeyInfo is a key as Inspect reads it.
type KeyInfo struct {
	State                       int16
	Token                       int64
	FingerprintLen, ResponseLen int64
	HasResponse                 bool
	// Leased: state 2 and the lease holds; Expired: expires_at has
	// passed. Both as of the database's now.
	Leased, Expired bool
	// LockedUntil is zero when the row has no lease deadline.
	Created, Expires, LockedUntil time.Time
}

// Micros is a time the queries return as microseconds since the epoch,
// in UTC; 0 is the zero time (no value).
func Micros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// ClaimParams describes a claim.
type ClaimParams struct {
	Key
	Fingerprint []byte
	TTL         time.Duration
	// Lease, when positive, claims in lease mode: the row is stored as
	// leased until now+Lease. Zero claims a row that commits done with tx.
	Lease time.Duration
	// LockWait bounds how long the claim waits for another transaction that
	// holds the key; negative waits without bound (the database's own lock
	// timeout applies).
	LockWait time.Duration
	// Now pins the database's "now" (tests only); zero uses the clock of
	// the database.
	Now time.Time
	// Favor is the shape a Runner gives Store.Run (Run only).
	Favor Favor
	// NoRecord: Run records no response (fn's is empty): it claims the key
	// before fn, as Do does, and writes nothing after fn (Run only; the
	// inbox's Handle). A Runner that cannot do better than a Do in a
	// transaction of its own returns ErrNoRun.
	NoRecord bool
}

// Favor says which of Store.Run's answers a Runner makes cheaper where it
// can trade one for the other (dedupe.WithFavor).
type Favor int8

const (
	// FavorDefault is the driver's own choice.
	FavorDefault Favor = iota
	// FavorFirstRuns: no read of the key before fn; the key is recorded
	// after fn, and a repeat runs fn and rolls it back.
	FavorFirstRuns
	// FavorRepeats: the key read before anything else, in autocommit; a
	// repeat ends there.
	FavorRepeats
)

// Claim is the outcome of ClaimParams.
type Claim struct {
	// Won is true when this call claimed the key (new, expired or lapsed).
	Won bool
	// Token is the claim's fencing token (Won only).
	Token int64
	// Takeover is true when the claim was won by taking over an expired
	// key or a lapsed lease, for engines that can tell (not SQLite's,
	// whose claim is one upsert). Observation only.
	Takeover bool
	// Existing describes the live key that someone else holds (not Won).
	Existing Existing
}

// Runner is implemented by engines that run dedupe.Store.Run, the
// operation in a transaction of sqlonce's own, in fewer round trips than
// a claim and a response write inside a caller's transaction take.
type Runner[TTx any] interface {
	// Run makes one attempt: it begins a transaction on the driver's
	// handle, looks the key up, and either ends that transaction and
	// reports the live key it found (Won false), or runs fn in it and
	// commits fn's work together with the key, done, holding fn's
	// response (Won true). fn's error, and any other, rolls the
	// transaction back and is returned.
	//
	// An error matching sqlonce.ErrStaleRead means that another
	// transaction recorded the key while fn ran; ErrTxEnded that fn
	// committed or rolled back the transaction. ErrNoRun asks the caller
	// to run the operation another way: the drivers return it for a
	// bounded p.LockWait, which needs the key held before fn runs.
	Run(ctx context.Context, p RunParams, fn func(ctx context.Context, tx TTx) ([]byte, error)) (RunResult, error)
}

// ErrTxEnded is returned by Runner.Run when fn committed or rolled back the
// transaction it was given.
// Store.Run wraps it in sqlonce.ErrInvalidArgument.
var ErrTxEnded = errors.New("fn ended the transaction Run gave it (Run commits it; return an error to roll it back)")

// ErrNoRun is returned by Runner.Run for parameters it leaves to the
// generic path (a claim inside a transaction of sqlonce's own).
var ErrNoRun = errors.New("driver: run another way")

// RunParams describes a Runner.Run: the key, recorded done with
// ClaimParams' Fingerprint and TTL. Lease must be zero.
type RunParams = ClaimParams

// RunResult is the outcome of a Runner.Run.
type RunResult struct {
	// Won is true when fn ran and its work committed with the key.
	Won bool
	// Response is fn's response (Won only).
	Response []byte
	// Takeover is Claim.Takeover for a Run.
	Takeover bool
	// Existing describes the live key found (not Won).
	Existing Existing
}

// Existing is what a claim found when it lost.
type Existing struct {
	Fingerprint []byte
	Response    []byte
	// Leased is true while a lease mode claimer holds the key.
	Leased bool
}
