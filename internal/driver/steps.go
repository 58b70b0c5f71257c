package driver

import (
	"context"
	"time"
)

// Steps is what a driver does for dedupe's operations of several steps,
// on the keys of NamespaceSteps (and NamespaceHTTPSteps).
type Steps[TTx any] interface {
	// StepGet reads k with its recovery point as of now (the database's
	// when zero); ok is false when there is no row.
	StepGet(ctx context.Context, tx TTx, k Key, now time.Time) (row StepRow, ok bool, err error)
	// StepStart inserts k, leased for lease and live for ttl, with
	// fingerprint and recovery as its recovery point, and returns its
	// token; ok is false, and nothing changed, when k exists. It never
	// takes a row over. ErrNoRun: the engine starts a key in autocommit
	// only (tx from its Autocommitter), not in a transaction.
	StepStart(ctx context.Context, tx TTx, k Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (token int64, ok bool, err error)
	// StepRestart starts k anew, as StepStart, in place of its expired
	// row read with token and read as its response, and reports whether
	// it did; the new token is token+1.
	StepRestart(ctx context.Context, tx TTx, k Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (bool, error)
	// StepResume takes over k's lapsed lease, read with token and with
	// read as its recovery point, for lease, writing recovery in place of
	// it, and reports whether it did; the new token is token+1. A lease
	// that holds, a token that moved on, a recovery point that moved on
	// (a step committed since: it keeps the token), an expired key: false.
	StepResume(ctx context.Context, tx TTx, k Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error)
	// StepSave writes recovery as k's recovery point and extends the lease
	// held with token by lease, and reports whether the lease was still
	// held with token.
	StepSave(ctx context.Context, tx TTx, k Key, token int64, recovery []byte, lease time.Duration, now time.Time) (bool, error)
	// StepStuck lists up to limit keys of namespace ns whose lease lapsed
	// and that have not expired, longest lapsed first.
	StepStuck(ctx context.Context, tx TTx, ns Namespace, limit int, now time.Time) ([]Key, error)
	// StepRedrive turns k's recorded end, read with token and read as its
	// response, back into a stopped operation (state 2) with recovery as
	// its recovery point, its lease lapsed as of now, live at least ttl
	// from now, and reports whether it did; the new token is token+1. A
	// token or response that moved on, a key not done, an expired key:
	// false.
	StepRedrive(ctx context.Context, tx TTx, k Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (bool, error)
}

// StepRow is a key of a namespace of steps as StepGet reads it.
type StepRow struct {
	Fingerprint []byte
	// Response is the recovery point while State is StateLeased, the
	// recorded response once StateDone.
	Response []byte
	State    int16
	Token    int64
	// Leased: the lease holds; Expired: expires_at has passed. Both as of
	// the database's now.
	Leased, Expired bool
}
