package sqlonce

import (
	"errors"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Sentinel errors shared by every strategy. Match them with errors.Is; the
// errors returned wrap them with detail (which key, which constraint, which
// state).
var (
	// ErrInvalidKey is returned before any SQL runs when a key or scope is
	// empty, longer than MaxKeyLen bytes, not valid UTF-8 or contains a NUL
	// byte, or when a fingerprint is longer than MaxFingerprintLen bytes.
	ErrInvalidKey = errors.New("sqlonce: invalid key")

	// ErrInvalidArgument is returned before any SQL runs for an argument
	// that can never work: a nil transaction (a nil *sql.Tx, a nil pgx.Tx),
	// a nil func, a negative duration, a limit out of range, a transition
	// with a zero state.
	ErrInvalidArgument = errors.New("sqlonce: invalid argument")

	// ErrResponseTooLarge is returned by dedupe when a response to record is
	// over the store's limit. The claim is undone in the transaction.
	ErrResponseTooLarge = errors.New("sqlonce: response too large")

	// ErrKeyReuse is returned by dedupe when a key is presented again with a
	// different request fingerprint. Nothing is replayed.
	ErrKeyReuse = errors.New("sqlonce: idempotency key reused with a different request")

	// ErrInProgress is returned by dedupe when another caller holds the key
	// and this call was told not to wait for it (WithNoWait, WithLockWait
	// after its wait, or a lease that has not lapsed).
	ErrInProgress = errors.New("sqlonce: operation in progress")

	// ErrNotFound is returned when the row an operation targets does not
	// exist (optimistic, statemachine), and by dedupe's Inspect and Forget
	// for a key that is not recorded.
	ErrNotFound = errors.New("sqlonce: row not found")

	// ErrInvalidTransition is returned by statemachine for a transition the
	// machine does not declare (before any SQL runs) and for a row whose
	// current state is neither the target nor past it.
	ErrInvalidTransition = errors.New("sqlonce: invalid state transition")

	// ErrLeaseLost is returned by dedupe lease operations when the lease is
	// no longer held with the caller's token: it lapsed and another caller
	// took the key over, or it was already completed or released.
	ErrLeaseLost = errors.New("sqlonce: lease lost")

	// ErrTooManyRows is returned when a statement that must touch at most one
	// row reports more: its WHERE clause is not on a key.
	ErrTooManyRows = errors.New("sqlonce: statement affected more than one row")

	// ErrStaleRead is returned when the statement reported no row changed but
	// the follow-up read still sees the state the statement expected. On
	// MySQL/MariaDB under REPEATABLE READ a plain SELECT reads the
	// transaction's old snapshot; read with FOR SHARE / LOCK IN SHARE MODE.
	// On PostgreSQL under REPEATABLE READ or SERIALIZABLE the snapshot cannot
	// see a concurrent commit. IsRetryable reports true for it: retrying the
	// transaction with a fresh snapshot resolves it.
	ErrStaleRead = errors.New("sqlonce: read did not see the row the statement saw")

	// ErrCommitUnknown is returned by operations that commit a transaction
	// of their own (dedupe.Store.Run, leases, purges, token.Store.Issue,
	// inbox.Inbox.Handle, httpidem) when the connection was lost while
	// COMMIT was under way: the transaction may or may not have committed,
	// and nothing on the client can tell which. Send the request again with
	// the same key: if the first commit went through, the repeat answers
	// AlreadyDone (with the recorded response); if not, it runs the work.
	//
	// The original error stays in the chain. sqlonce does not resend
	// itself: after a commit that went through, the resend's answer differs
	// from the first attempt's (Run answers AlreadyDone for work this call
	// did, a lease's Complete ErrLeaseLost), and only the caller knows
	// which answer it needs. IsRetryable is false for it. IsCommitUnknown
	// also recognises a lost connection in the error of a COMMIT of yours.
	ErrCommitUnknown = driver.ErrCommitUnknown

	// ErrReadOnly is returned when the server refused a write because it
	// takes none: a PostgreSQL hot standby (SQLSTATE 25006,
	// read_only_sql_transaction), a MariaDB/MySQL server or replica
	// running with read_only (1290, 1836), or a transaction begun read-only
	// (25006, 1792). sqlonce is pointed at the wrong server: route it, and
	// the business transaction it joins, to the primary. Nothing was
	// committed; a resend with the same key to the primary is safe. The
	// driver's error stays in the chain. IsRetryable is false for it:
	// the same server refuses again.
	//
	// A read that ran before the refused write (Store.Run reads the key
	// first) answered from the replica's copy; when the copy had the key
	// the answer is a correct AlreadyDone of work the primary committed,
	// when it lacked it the work ran and its writes were refused with
	// this error. A replica that takes writes (MariaDB without read_only)
	// cannot be told from a primary: see docs/deployments.md.
	ErrReadOnly = driver.ErrReadOnly
)

// MaxKeyLen is the longest scope or key, in bytes, that sqlonce accepts.
const MaxKeyLen = 255

// MaxFingerprintLen is the longest request fingerprint, in bytes: room for
// a SHA-512 digest. dedupe.Fingerprint returns 32 bytes (SHA-256).
const MaxFingerprintLen = 64
