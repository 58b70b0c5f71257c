package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
)

// Scope is a key's namespace: the caller alone. What the request is
// (method, route, message) belongs in the fingerprint, so that a key
// reused on another endpoint is refused rather than run. kind keeps
// apart keys of different origins (a client's, a derived one, another
// transport's). A scope the store would refuse (too long, not valid
// UTF-8, a NUL byte) is replaced by its hash, which no readable scope can
// equal (those have ':' after kind).
func Scope(kind byte, principal string) string {
	s := string(kind) + ":" + principal
	if keys.Check("scope", s) == nil {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return string(kind) + "#" + hex.EncodeToString(sum[:])
}

// Outcome is how a request ended.
type Outcome int

const (
	// Answered: the last attempt's own answer is the client's; it
	// committed (recorded with the key, or a request without a key), or
	// was not to be recorded and rolled back (ErrNotRecorded, a Failure).
	Answered Outcome = iota
	// Replayed: the key was recorded earlier; Result.Response holds the
	// record.
	Replayed
	// InProgress: another request holds the key.
	InProgress
	// Reused: the key was recorded with another fingerprint.
	Reused
	// TooLarge: the answer could not be recorded; rolled back.
	TooLarge
	// Unknown: COMMIT may or may not have reached the database; the work
	// may be done. With the driver's own transactions (Runner.Run) only
	// an error matching sqlonce.ErrCommitUnknown, which the driver's
	// COMMIT sets when its connection broke on the way, says so; with a
	// caller's RunTx, any error after the work returned that is not a
	// retry request.
	Unknown
	// Gone: the request's context ended, so nobody waits for the answer.
	// The work rolled back, or, when the context ended while it
	// committed, may be done (as with Unknown); a retry with the same key
	// replays it or runs it once.
	Gone
	// Panicked: the handler panicked; rolled back. The transport panics
	// again.
	Panicked
	// Failed: any other error; rolled back, not carried out.
	Failed
	// ReadOnly: the server refused the writes (sqlonce.ErrReadOnly): a
	// standby, a read-only replica, a primary demoted by a failover.
	// Rolled back, not carried out; the same request succeeds once the
	// application reaches a primary.
	ReadOnly
	// Refused: the store refused the claim for the way it is set up
	// (sqlonce.ErrInvalidArgument after the request was checked), such
	// as a bounded lock wait on a sharded Vitess keyspace
	// (driver.ErrShardedLockWait). Rolled back, not carried out, and the
	// same request fails again until the server is set up otherwise: the
	// transport's answer must not ask for a retry. RefusedDetail words it.
	Refused
)

// RefusedDetail is what a transport tells the client of a Refused
// request: not carried out, not worth sending again, and, when it is
// known, what the server needs.
func RefusedDetail(err error, what, key string) string {
	if errors.Is(err, driver.ErrShardedLockWait) {
		return "the " + what + " was not carried out, and sending it again will not succeed: this server keeps its " + key +
			"s on a sharded Vitess keyspace, where they cannot be claimed; they need an unsharded keyspace"
	}
	return "the " + what + " was not carried out, and sending it again will not succeed: this server's database refuses its " + key + "s as it is set up"
}

// RefusedError is the error a transport reports (logs) for a Refused
// request: err, with the fix when it is known.
func RefusedError(err error, transport string) error {
	if errors.Is(err, driver.ErrShardedLockWait) {
		return fmt.Errorf("%s: every request with a key fails until its keys are on an unsharded keyspace "+
			"(a driver whose DSN names an unsharded keyspace): its claims never wait for a request with the same key, "+
			"which vtgate cannot bound on a sharded keyspace: %w", transport, err)
	}
	return fmt.Errorf("%s: every request with a key fails until the database is set up otherwise: %w", transport, err)
}

var (
	// ErrNotRecorded, returned by an attempt, rolls its transaction back
	// and leaves its answer to the client unrecorded.
	ErrNotRecorded = errors.New("idem: answer not recorded")
	// ErrPanicked, returned by an attempt, rolls its transaction back and
	// ends the request with Panicked.
	ErrPanicked = errors.New("idem: handler panicked")
)

// Failure carries an error the handler reported out of its transaction,
// so that the transaction rolls back; when the database asks for a retry
// (sqlonce.IsRetryable) the request runs again.
type Failure struct{ Err error }

func (e *Failure) Error() string { return "the handler failed: " + e.Err.Error() }
func (e *Failure) Unwrap() error { return e.Err }

// Runner runs requests in transactional mode.
type Runner[TTx any] struct {
	Store *dedupe.Store[TTx]
	// RunTx begins a transaction, calls fn, commits when fn returns nil
	// and rolls back otherwise.
	RunTx func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
	// Run, when set, runs a request that has a key through the Store's
	// Run, which begins the transaction itself in the fewest round trips
	// its driver has; RunTx then serves requests without a key. Set it
	// when RunTx is the driver's own (not httpidem.NewWithTxFunc's): the driver then
	// decides whether an error at COMMIT leaves the outcome unknown
	// (sqlonce.ErrCommitUnknown), and any other error is known to have
	// rolled back. Without it RunTx is the caller's, whose COMMIT cannot
	// be told apart: every error after the work returned, other than a
	// retry request, is taken as unknown.
	Run bool
}

// Serve runs one request: attempt runs the handler in tx and returns the
// record of its answer (or ErrNotRecorded, ErrPanicked, a *Failure, an
// error matching sqlonce.ErrResponseTooLarge). With req, the key is
// claimed in the same transaction and the record stored with it; without,
// attempt runs alone. An attempt the database refuses (deadlock,
// serialization failure) is run again in a new transaction, up to
// owntx.Attempts. op sees each attempt, and the request's result.
func (r Runner[TTx]) Serve(ctx context.Context, req *dedupe.Request, attempt func(ctx context.Context, tx TTx) ([]byte, error), op *obs.Op) (sqlonce.Result, Outcome, error) {
	for n := 1; ; n++ {
		var (
			res sqlonce.Result
			err error
			// committing is set when fn returns nil: an error RunTx
			// returns after that comes from COMMIT (or from what a
			// caller's runner does after fn); the work may be done.
			committing bool
		)
		if r.Run && req != nil {
			// Run attempts, and retries, itself, reporting each attempt
			// to op: Serve only reads the outcome.
			res, err = r.Store.Run(obs.With(ctx, op), *req, func(ctx context.Context, tx TTx) ([]byte, error) {
				b, err := attempt(ctx, tx)
				committing = err == nil
				return b, err
			})
			n = owntx.Attempts
		} else {
			err = r.RunTx(ctx, func(ctx context.Context, tx TTx) error {
				var err error
				if req == nil {
					_, err = attempt(ctx, tx)
				} else {
					res, err = r.Store.DoResponse(ctx, tx, *req, func(ctx context.Context) ([]byte, error) { return attempt(ctx, tx) })
				}
				committing = err == nil
				return err
			})
			if !errors.Is(err, ErrPanicked) {
				op.Tried(err)
			}
		}
		if errors.Is(err, ErrPanicked) {
			return res, Panicked, err
		}
		op.Set(res, err)
		var failed *Failure
		switch {
		case err == nil && req != nil && res.AlreadyDone():
			return res, Replayed, nil
		case err == nil:
			return res, Answered, nil
		case r.unknown(committing, err):
			if ctx.Err() != nil {
				return res, Gone, err
			}
			return res, Unknown, err
		case errors.As(err, &failed) && sqlonce.IsRetryable(failed.Err) && n < owntx.Attempts && owntx.Pause(ctx, n):
			continue
		case errors.Is(err, sqlonce.ErrReadOnly) || driver.Classify(err).Has(driver.ReadOnly):
			// The server takes no writes: nothing was carried out,
			// whatever the handler answered when its own write was the
			// one refused.
			return res, ReadOnly, driver.ReadOnlyError(err)
		case errors.Is(err, ErrNotRecorded) || errors.As(err, &failed):
			return res, Answered, err
		case errors.Is(err, sqlonce.ErrInProgress):
			return res, InProgress, err
		case errors.Is(err, sqlonce.ErrKeyReuse):
			return res, Reused, err
		case errors.Is(err, sqlonce.ErrResponseTooLarge):
			return res, TooLarge, err
		case errors.Is(err, sqlonce.ErrInvalidArgument):
			return res, Refused, err
		case ctx.Err() != nil:
			return res, Gone, err
		case sqlonce.IsRetryable(err) && !driver.Classify(err).Has(driver.LockNotAvailable) && n < owntx.Attempts && owntx.Pause(ctx, n):
			continue
		default:
			return res, Failed, err
		}
	}
}

// unknown reports whether err, returned after the work returned nil
// (committing), leaves the outcome of the transaction unknown. The
// driver's own COMMIT marks such an error with sqlonce.ErrCommitUnknown
// when its connection broke on the way; any other error of the driver's
// (the server's answer that it rolled back, an answer too large to
// record, refused before COMMIT) is known to have left nothing behind. A
// caller's RunTx gives no such mark: after the work returned, only an
// error the database reports as a retry request says the commit did not
// happen; after anything else it may have.
func (r Runner[TTx]) unknown(committing bool, err error) bool {
	switch {
	case !committing:
		return false
	case errors.Is(err, sqlonce.ErrCommitUnknown):
		return true
	case r.Run:
		return false
	default:
		return !sqlonce.IsRetryable(err)
	}
}
