package dedupe

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// KeyState is the state of a recorded key, as Store.Inspect reads it.
type KeyState int8

const (
	// KeyDone: the work was done (committed with Do or Run, or a
	// completed lease); repeats get AlreadyDone and the recorded response.
	KeyDone KeyState = iota + 1
	// KeyLeased: a lease holds the key; repeats get sqlonce.ErrInProgress.
	KeyLeased
	// KeyLapsed: a lease whose deadline passed (or that was released);
	// the next claim takes the key over and runs the work.
	KeyLapsed
	// KeyExpired: past its expiry; the next claim takes it over, and
	// Purge deletes it.
	KeyExpired
)

var keyStates = [...]string{KeyDone: "done", KeyLeased: "leased", KeyLapsed: "lapsed", KeyExpired: "expired"}

// String returns "done", "leased", "lapsed" or "expired".
func (s KeyState) String() string {
	if s > 0 && int(s) < len(keyStates) {
		return keyStates[s]
	}
	return fmt.Sprintf("KeyState(%d)", int8(s))
}

// KeyInfo describes a recorded key: what support needs to answer "why
// did my retry get the old answer?". Times are the database's.
type KeyInfo struct {
	Scope, Key string
	State      KeyState
	// Created is when the key was claimed (taken over, for a key claimed
	// again after it expired or its lease lapsed); Expires, when it
	// expires.
	Created, Expires time.Time
	// LeaseUntil is a lease's deadline: zero for a key recorded by Do or
	// Run and for a completed lease.
	LeaseUntil time.Time
	// Token is the fencing token of the key's last claim.
	Token int64
	// FingerprintSize is the recorded fingerprint's length in bytes, 0
	// when the key was claimed without one.
	FingerprintSize int
	// HasResponse tells whether a response is recorded (it may be empty:
	// ResponseSize 0).
	HasResponse  bool
	ResponseSize int
}

// Inspect reads a key of the Store (never one of another scope, nor one
// httpidem or inbox keeps) on the driver's database handle. It returns an error matching
// sqlonce.ErrNotFound when there is no such key: never claimed, deleted
// by Purge or Forget, or claimed by a transaction that has not committed
// yet. The state is judged on the database's clock.
func (s *Store[TTx]) Inspect(ctx context.Context, scope, key string) (info KeyInfo, err error) {
	op := obs.Start(s.observer, "dedupe", "Inspect", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	info, _, err = s.inspect(ctx, s.key(scope, key), false, &op)
	return info, err
}

// inspect reads k, and its row of a namespace of steps when steps.
func (s *Store[TTx]) inspect(ctx context.Context, k driver.Key, steps bool, op *obs.Op) (KeyInfo, driver.StepRow, error) {
	if err := checkKey(k.Scope, k.Key); err != nil {
		return KeyInfo{}, driver.StepRow{}, err
	}
	var (
		ki  driver.KeyInfo
		row driver.StepRow
		ok  bool
	)
	err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, op, func(ctx context.Context, tx TTx) error {
		now := testclock.Now(ctx)
		var err error
		if ki, ok, err = s.engine.Inspect(ctx, tx, k, now); err != nil || !ok || !steps {
			return err
		}
		row, ok, err = s.engine.StepGet(ctx, tx, k, now)
		return err
	})
	if err != nil {
		return KeyInfo{}, row, fmt.Errorf("sqlonce/dedupe: inspect key %q in scope %q: %w", k.Key, k.Scope, err)
	}
	if !ok {
		return KeyInfo{}, row, notFound(k.Scope, k.Key)
	}
	info := KeyInfo{
		Scope: k.Scope, Key: k.Key, Created: ki.Created, Expires: ki.Expires, LeaseUntil: ki.LockedUntil, Token: ki.Token,
		FingerprintSize: int(ki.FingerprintLen), HasResponse: ki.HasResponse, ResponseSize: int(ki.ResponseLen),
	}
	switch {
	case ki.Expired:
		info.State = KeyExpired
	case ki.State == driver.StateLeased && ki.Leased:
		info.State = KeyLeased
	case ki.State == driver.StateLeased:
		info.State = KeyLapsed
	default:
		info.State = KeyDone
	}
	return info, row, nil
}

// ForgetOption adjusts one Store.Forget; Forget applies the options
// before any SQL runs and returns the first one's error.
type ForgetOption func(*forgetOptions) error

type forgetOptions struct{ leased bool }

// ForgetLeased lets Forget delete a key whose lease still holds. The
// holder's Complete, Release and Extend then fail with
// sqlonce.ErrLeaseLost, and the next claim runs the work again while the
// holder may still be doing it: only for a holder known to be gone.
func ForgetLeased() ForgetOption {
	return func(o *forgetOptions) error {
		o.leased = true
		return nil
	}
}

// Forget deletes a key of the Store (never one of another scope, nor one
// httpidem or inbox keeps) on the driver's database handle, so that its next claim runs the work
// again: to let a customer retry what was recorded, say. A key whose
// lease still holds is refused with an error matching
// sqlonce.ErrInProgress, unless ForgetLeased says otherwise, and only
// such a key; one that does not exist, with sqlonce.ErrNotFound. A key
// that a transaction still open is recording (a Run, a Do) does not exist
// yet: it is not found, or forgotten once that transaction commits; a key
// recorded while being forgotten, again after Forget's retries, returns
// an error matching sqlonce.ErrStaleRead. Forgetting a key does not undo
// its work: the next claim does it again.
func (s *Store[TTx]) Forget(ctx context.Context, scope, key string, opts ...ForgetOption) (err error) {
	op := obs.Start(s.observer, "dedupe", "Forget", scope, key)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	return s.forget(ctx, s.key(scope, key), opts, &op)
}

// forget deletes k, as Forget says.
func (s *Store[TTx]) forget(ctx context.Context, k driver.Key, opts []ForgetOption, op *obs.Op) error {
	if err := checkKey(k.Scope, k.Key); err != nil {
		return err
	}
	var o forgetOptions
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: forget option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	var deleted, exists bool
	err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, op, func(ctx context.Context, tx TTx) error {
		now := testclock.Now(ctx)
		var err error
		if deleted, err = s.engine.Forget(ctx, tx, k, o.leased, now); err != nil || deleted {
			return err
		}
		// Nothing deleted: no such key, or a lease that holds, or a key
		// committed since the delete looked for it (a Run, a Do, a
		// Complete whose transaction was still open then): the delete
		// did not see the row the read sees, and runs again.
		var ki driver.KeyInfo
		ki, exists, err = s.engine.Inspect(ctx, tx, k, now)
		if err == nil && exists && (o.leased || !ki.Leased) {
			return fmt.Errorf("%w: key %q in scope %q was recorded while being forgotten", sqlonce.ErrStaleRead, k.Key, k.Scope)
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlonce/dedupe: forget key %q in scope %q: %w", k.Key, k.Scope, err)
	case deleted:
		return nil
	case exists:
		return fmt.Errorf("%w: key %q in scope %q is leased; ForgetLeased forgets it anyway", sqlonce.ErrInProgress, k.Key, k.Scope)
	}
	return notFound(k.Scope, k.Key)
}

func checkKey(scope, key string) error {
	if err := keys.Check("scope", scope); err != nil {
		return err
	}
	return keys.Check("key", key)
}

func notFound(scope, key string) error {
	return fmt.Errorf("%w: key %q in scope %q", sqlonce.ErrNotFound, key, scope)
}
