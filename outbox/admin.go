package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// ErrNotParked is returned by Redrive for a message that is not parked.
var ErrNotParked = errors.New("sqlonce/outbox: message is not parked")

// Info is a message as Get and List read it.
type Info struct {
	Message
	// Seq is the message's place in the outbox, in the order of its
	// insert: List's cursor.
	Seq   int64
	State State
	// Attempts is how many publishes of the message failed (since it was
	// enqueued or last re-driven); LastError is the last one's error.
	Attempts  int
	LastError string
	// Leased: a relay holds the message (it is being published) as of the
	// database's now, until LockedUntil.
	Leased bool
	// Created is when it was enqueued, Available when it is due (a failed
	// message's next publish), Sent when the broker confirmed it (zero
	// until then), by the database's clock.
	Created, Available, Sent, LockedUntil time.Time
}

func info(row driver.OutboxRow) (Info, error) {
	m, err := decode(row.OutboxMessage)
	if err != nil {
		return Info{}, err
	}
	return Info{
		Message: m, Seq: row.Seq, State: State(row.State), Attempts: int(row.Attempts), LastError: row.LastError,
		Leased: row.Leased, Created: row.Created, Available: row.Available, Sent: row.Sent, LockedUntil: row.LockedUntil,
	}, nil
}

// Get reads the message with id on the driver's database handle; one
// that is not in the outbox (never enqueued, not committed yet, or
// purged) returns an error matching sqlonce.ErrNotFound, and an invalid
// id sqlonce.ErrInvalidKey.
func (s *Store[TTx]) Get(ctx context.Context, id string) (inf Info, err error) {
	op := obs.Start(s.observer, "outbox", "Get", "", id)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	if err := keys.Check("message id", id); err != nil {
		return Info{}, err
	}
	var (
		row driver.OutboxRow
		ok  bool
	)
	err = owntx.RunObserved(ctx, s.engine, &op, func(ctx context.Context, tx TTx) error {
		var err error
		row, ok, err = s.engine.OutboxGet(ctx, tx, id, testclock.Now(ctx))
		return err
	})
	switch {
	case err != nil:
		return Info{}, fmt.Errorf("sqlonce/outbox: get message %q: %w", id, err)
	case !ok:
		return Info{}, notFound(id)
	}
	return info(row)
}

func notFound(id string) error {
	return fmt.Errorf("%w: no message %q in the outbox", sqlonce.ErrNotFound, id)
}

// DefaultListLimit is the page size List uses for a limit of 0;
// MaxListLimit the largest it accepts.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// List reads up to limit messages in state, in the order they were
// enqueued, from the one after the message whose Seq is after (0 for the
// first page): pass the last Info's Seq to read the next page. A limit of
// 0 is DefaultListLimit; an unknown state, a negative after or a limit
// below 0 or over MaxListLimit returns sqlonce.ErrInvalidArgument before
// any SQL runs.
func (s *Store[TTx]) List(ctx context.Context, state State, after int64, limit int) (list []Info, err error) {
	op := obs.Start(s.observer, "outbox", "List", state.String(), "")
	defer func() { op.Rows(int64(len(list))); err = op.Done(ctx, err) }()
	if limit == 0 {
		limit = DefaultListLimit
	}
	switch {
	case !state.valid():
		return nil, fmt.Errorf("%w: outbox: unknown state %v", sqlonce.ErrInvalidArgument, state)
	case after < 0:
		return nil, fmt.Errorf("%w: outbox: list after %d, below 0", sqlonce.ErrInvalidArgument, after)
	case limit < 1 || limit > MaxListLimit:
		return nil, fmt.Errorf("%w: outbox: list limit %d is outside 1..%d", sqlonce.ErrInvalidArgument, limit, MaxListLimit)
	}
	var rows []driver.OutboxRow
	err = owntx.RunObserved(ctx, s.engine, &op, func(ctx context.Context, tx TTx) error {
		var err error
		rows, err = s.engine.OutboxList(ctx, tx, int16(state), after, limit, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlonce/outbox: list %v messages: %w", state, err)
	}
	list = make([]Info, 0, len(rows))
	for _, row := range rows {
		inf, err := info(row)
		if err != nil {
			return list, err
		}
		list = append(list, inf)
	}
	return list, nil
}

// Stats is what the outbox holds, for a dashboard or an alert.
type Stats struct {
	// Pending is the backlog: messages not sent yet, being published or
	// waiting (for a relay, for their backoff, behind a parked message of
	// their key).
	Pending int64
	// OldestPending is when the oldest pending message was enqueued, by
	// the database's clock (zero when none is pending); OldestPendingAge
	// is its age as of Stats' call, by the application's clock. An age
	// that keeps growing is a relay that does not run, or a key stuck.
	OldestPending    time.Time
	OldestPendingAge time.Duration
	// Parked counts the messages that failed for good: each holds back
	// its key. Sent counts those sent and not purged yet.
	Parked, Sent int64
}

// Stats counts the outbox's messages on the driver's database handle.
func (s *Store[TTx]) Stats(ctx context.Context) (st Stats, err error) {
	op := obs.Start(s.observer, "outbox", "Stats", "", "")
	defer func() { err = op.Done(ctx, err) }()
	var ds driver.OutboxStats
	err = owntx.RunObserved(ctx, s.engine, &op, func(ctx context.Context, tx TTx) error {
		var err error
		ds, err = s.engine.OutboxStats(ctx, tx, testclock.Now(ctx))
		return err
	})
	if err != nil {
		return Stats{}, fmt.Errorf("sqlonce/outbox: stats: %w", err)
	}
	st = Stats{Pending: ds.Pending, OldestPending: ds.OldestPending, Parked: ds.Parked, Sent: ds.Sent}
	if !ds.OldestPending.IsZero() {
		st.OldestPendingAge = max(now(ctx).Sub(ds.OldestPending), 0)
	}
	return st, nil
}

// Redrive makes the parked message with id pending again, due at once
// with its attempts back to 0, on the driver's database handle: a relay
// publishes it next, then the later messages of its key. It returns an
// error matching ErrNotParked for a message that is pending or sent,
// sqlonce.ErrNotFound for one not in the outbox, and sqlonce.ErrInvalidKey
// for an invalid id.
func (s *Store[TTx]) Redrive(ctx context.Context, id string) (err error) {
	op := obs.Start(s.observer, "outbox", "Redrive", "", id)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound, ErrNotParked) }()
	if err := keys.Check("message id", id); err != nil {
		return err
	}
	var (
		done, ok bool
		row      driver.OutboxRow
	)
	err = owntx.RunObserved(ctx, s.engine, &op, func(ctx context.Context, tx TTx) error {
		now := testclock.Now(ctx)
		var err error
		if done, err = s.engine.OutboxRedrive(ctx, tx, id, now); err != nil || done {
			return err
		}
		row, ok, err = s.engine.OutboxGet(ctx, tx, id, now)
		if err == nil && ok && State(row.State) == Parked {
			return fmt.Errorf("%w: message %q was parked while being re-driven", sqlonce.ErrStaleRead, id)
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlonce/outbox: redrive message %q: %w", id, err)
	case done:
		return nil
	case ok:
		return fmt.Errorf("%w: message %q is %v", ErrNotParked, id, State(row.State))
	}
	return notFound(id)
}

// ForgetOption adjusts one Store.Forget; Forget applies the options
// before any SQL runs and returns the first one's error.
type ForgetOption func(*forgetOptions) error

type forgetOptions struct{ leased bool }

// ForgetLeased lets Forget delete a message a relay is publishing. The
// relay's mark then changes nothing, and the message may reach the
// broker all the same.
func ForgetLeased() ForgetOption {
	return func(o *forgetOptions) error {
		o.leased = true
		return nil
	}
}

// Forget deletes the message with id from the outbox on the driver's
// database handle, whatever its state: a parked message, to let the later
// messages of its key go; a pending one, never to publish it. A message a
// relay is publishing (leased) is refused with an error matching
// sqlonce.ErrInProgress, unless ForgetLeased says otherwise; one not in
// the outbox returns sqlonce.ErrNotFound, an invalid id
// sqlonce.ErrInvalidKey. Once forgotten, the id can be enqueued again.
func (s *Store[TTx]) Forget(ctx context.Context, id string, opts ...ForgetOption) (err error) {
	op := obs.Start(s.observer, "outbox", "Forget", "", id)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	if err := keys.Check("message id", id); err != nil {
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
	err = owntx.RunObserved(ctx, s.engine, &op, func(ctx context.Context, tx TTx) error {
		now := testclock.Now(ctx)
		var err error
		if deleted, err = s.engine.OutboxForget(ctx, tx, id, o.leased, now); err != nil || deleted {
			return err
		}
		var row driver.OutboxRow
		row, exists, err = s.engine.OutboxGet(ctx, tx, id, now)
		if err == nil && exists && (o.leased || !row.Leased) {
			return fmt.Errorf("%w: message %q was enqueued or released while being forgotten", sqlonce.ErrStaleRead, id)
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("sqlonce/outbox: forget message %q: %w", id, err)
	case deleted:
		return nil
	case exists:
		return fmt.Errorf("%w: message %q is being published by a relay; ForgetLeased forgets it anyway", sqlonce.ErrInProgress, id)
	}
	return notFound(id)
}
