package driver

import (
	"cmp"
	"context"
	"slices"
	"time"
	"unicode/utf8"
)

// Outbox message states, stored in sqlonce_outbox.state. Values are
// stored: never renumber them.
const (
	// OutboxPending: waiting to be published (or being published, while
	// locked_until holds).
	OutboxPending int16 = 0
	// OutboxSent: the broker confirmed it; purged after the retention.
	OutboxSent int16 = 1
	// OutboxParked: it failed too many times; it holds back the later
	// messages of its ordering key until re-driven or forgotten.
	OutboxParked int16 = 2
)

// Outbox is what a driver does for the transactional outbox (package
// outbox), on the sqlonce_outbox table. Every method runs its statements
// in tx and never ends it. A zero now is the database's clock; tests pin
// it.
type Outbox[TTx any] interface {
	// OutboxInsert adds m in tx, due at once. inserted is false, and
	// nothing changed, when a message with m.ID is already in the table:
	// stored is then that message's fingerprint, for the caller to tell a
	// repeat from an id reused for another message. On PostgreSQL the
	// same statement notifies OutboxChannel, delivered at COMMIT, unless
	// m.NoNotify is set; other engines ignore NoNotify.
	OutboxInsert(ctx context.Context, tx TTx, m OutboxMessage, now time.Time) (inserted bool, stored []byte, err error)
	// OutboxClaim leases up to limit messages that are due: pending,
	// available_at reached, not leased (or their lease lapsed), and the
	// first message of their ordering key that is not sent (a key's
	// message leased, pending or parked holds back its later ones; an
	// empty ordering key orders nothing). It skips rows other
	// transactions hold locked (SKIP LOCKED or the dialect's equivalent),
	// sets each claimed row's lease_token to a new value (the old one
	// plus one) and locked_until to now+lease, and returns them in seq
	// order. A message of a key whose earlier message another open
	// claim holds is not claimed: the check reads without a lock. On
	// Galera a claim's locks are its node's: claims on two nodes may
	// lease the same row, and one of the two COMMITs fails (1213).
	OutboxClaim(ctx context.Context, tx TTx, limit int, lease time.Duration, now time.Time) ([]OutboxClaimed, error)
	// OutboxSent marks as sent each listed message still leased with its
	// token, and returns how many it marked: one whose lease was taken
	// over (its token moved on) or released (OutboxFailed) is left alone.
	// A lease that lapsed but was not taken over still marks.
	OutboxSent(ctx context.Context, tx TTx, leases []OutboxLease, now time.Time) (int64, error)
	// OutboxFailed records a failed publish of a message leased with its
	// token: attempts+1, last_error = errText, the lease released, due
	// again at retryAt (a zero retryAt: now), or parked when park is
	// true. It reports whether the lease was still held (as OutboxSent
	// judges it). errText is cut to OutboxMaxError bytes.
	OutboxFailed(ctx context.Context, tx TTx, lease OutboxLease, errText string, retryAt time.Time, park bool, now time.Time) (bool, error)
	// OutboxPurge deletes up to limit messages sent before sentBefore
	// (the caller's clock: now minus the retention) and reports how many.
	OutboxPurge(ctx context.Context, tx TTx, limit int, sentBefore time.Time) (int64, error)
	// OutboxGet reads the message with id; ok is false when there is none.
	OutboxGet(ctx context.Context, tx TTx, id string, now time.Time) (row OutboxRow, ok bool, err error)
	// OutboxList lists up to limit messages in state, with seq above
	// afterSeq, in seq order.
	OutboxList(ctx context.Context, tx TTx, state int16, afterSeq int64, limit int, now time.Time) ([]OutboxRow, error)
	// OutboxRedrive makes a parked message pending again, due at once,
	// attempts 0, and reports whether it did (false: no such message, or
	// not parked).
	OutboxRedrive(ctx context.Context, tx TTx, id string, now time.Time) (bool, error)
	// OutboxForget deletes the message with id, unless it is leased and
	// force is false, and reports whether it deleted a row.
	OutboxForget(ctx context.Context, tx TTx, id string, force bool, now time.Time) (bool, error)
	// OutboxStats counts the table's messages as of now.
	OutboxStats(ctx context.Context, tx TTx, now time.Time) (OutboxStats, error)
}

// OutboxChannel is the PostgreSQL notification channel OutboxInsert
// notifies and an OutboxListener listens on.
const OutboxChannel = "sqlonce_outbox"

// OutboxListener is implemented by engines that can wake a relay when a
// message commits (PostgreSQL's LISTEN/NOTIFY, on a connection of its
// own), so that it leaves at once rather than at the next poll.
type OutboxListener interface {
	// OutboxListen listens on OutboxChannel and calls wake (which must not
	// block) on each notification until ctx ends or the connection fails,
	// and returns why. It calls ready once, when it listens. It returns
	// ErrNoRun when the handle cannot hold a session (PgBouncer in
	// transaction mode): the relay then only polls.
	OutboxListen(ctx context.Context, ready, wake func()) error
}

// OutboxMessage is a message as OutboxInsert stores it.
type OutboxMessage struct {
	ID          string
	Topic       string
	OrderingKey string
	Payload     []byte
	// Headers are encoded by package outbox; the driver stores the bytes.
	Headers []byte
	// Fingerprint is a digest of the message package outbox computes, to
	// tell a repeated Enqueue from an id reused for another message.
	Fingerprint []byte
	// NoNotify, read by OutboxInsert alone, inserts without notifying
	// OutboxChannel (outbox.WithoutNotify); it is never stored, and
	// false in what OutboxClaim, OutboxGet and OutboxList read.
	NoNotify bool
}

// OutboxLease identifies a claimed message: its seq and the lease_token
// OutboxClaim set.
type OutboxLease struct {
	Seq   int64
	Token int64
}

// OutboxClaimed is a message OutboxClaim leased.
type OutboxClaimed struct {
	OutboxLease
	OutboxMessage
	// Attempts is how many publishes failed before this one.
	Attempts int32
	Created  time.Time
}

// OutboxRow is a message as OutboxGet and OutboxList read it.
type OutboxRow struct {
	Seq int64
	OutboxMessage
	State     int16
	Attempts  int32
	LastError string
	// Leased: the lease holds as of now.
	Leased                   bool
	Created, Available, Sent time.Time
	LockedUntil              time.Time
}

// OutboxStats is what OutboxStats counts: the backlog (pending messages,
// leased or not) and the creation time of its oldest message (zero when
// there is none), the parked and the sent messages.
type OutboxStats struct {
	Pending, Parked, Sent int64
	OldestPending         time.Time
}

// SortOutboxClaimed sorts claimed messages in seq order, the order
// OutboxClaim returns them in (RETURNING promises none).
func SortOutboxClaimed(c []OutboxClaimed) {
	slices.SortFunc(c, func(a, b OutboxClaimed) int { return cmp.Compare(a.Seq, b.Seq) })
}

// OutboxMaxError is the most bytes of a failed publish's error text
// OutboxFailed stores in last_error.
const OutboxMaxError = 1024

// OutboxErrorText is errText cut to OutboxMaxError bytes, at a rune's
// start: last_error keeps the start of a long error, valid UTF-8.
func OutboxErrorText(errText string) string {
	if len(errText) <= OutboxMaxError {
		return errText
	}
	i := OutboxMaxError
	for i > 0 && !utf8.RuneStart(errText[i]) {
		i--
	}
	return errText[:i]
}
