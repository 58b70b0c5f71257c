package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/storecfg"
)

// DefaultTTL is how long a message id is remembered unless WithTTL says
// otherwise: 7 days, longer than brokers usually keep redelivering.
const DefaultTTL = 7 * 24 * time.Hour

// Inbox applies each message a consumer receives once: the message id is
// claimed in the transaction that applies the message. It is safe for
// concurrent use by any number of consumer goroutines and processes.
type Inbox[TTx any] struct {
	consumer string
	store    *dedupe.Store[TTx]
	observer sqlonce.Observer
}

// Option configures an Inbox.
type Option func(*options) error

type options struct {
	ttl time.Duration
}

// WithTTL sets how long a message id is remembered after its message was
// applied (DefaultTTL otherwise, and for 0; negative is
// sqlonce.ErrInvalidArgument). A message redelivered after that runs
// again: choose it longer than the broker can redeliver a message (its
// retention, its maximum redelivery delay).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) error {
		switch {
		case ttl < 0:
			return fmt.Errorf("%w: inbox TTL %v is negative", sqlonce.ErrInvalidArgument, ttl)
		case ttl == 0:
			ttl = DefaultTTL
		}
		o.ttl = ttl
		return nil
	}
}

// New returns an Inbox for the consumer named consumer: the scope of its
// message ids, so that two consumers of one stream (an email sender and a
// ledger writer) each apply every message once. It returns
// sqlonce.ErrInvalidKey for an invalid name and sqlonce.ErrInvalidArgument
// for a nil driver or one not built by its package's New (a zero Driver),
// or an invalid option.
func New[TTx any](d sqlonce.Driver[TTx], consumer string, opts ...Option) (*Inbox[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: inbox: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	if err := keys.Check("consumer", consumer); err != nil {
		return nil, err
	}
	o := options{ttl: DefaultTTL}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	// No WithNoWait: a redelivery that arrives while the first delivery's
	// transaction is still open waits for it, then finds the message
	// applied (ack it) or applies it (the first rolled back).
	// The Inbox reports its own operations; its Store must not report
	// them again as dedupe's. Its keys live in a namespace of their own.
	store, err := dedupe.New(obs.Bare(d), dedupe.WithTTL(o.ttl), func(o *storecfg.Options) error {
		o.Namespace, o.NoRecord = driver.NamespaceInbox, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Inbox[TTx]{consumer: consumer, store: store, observer: obs.Of(d)}, nil
}

// Handle applies the message with id msgID: in a transaction of its own on
// the driver's database handle it claims the
// id and, if the claim is won, runs fn with the transaction; fn's writes
// and the claim commit together. Ack the message when Handle returns nil,
// after it returned, and never before:
//   - FirstRun: this delivery applied the message;
//   - AlreadyDone: an earlier delivery did (a redelivery after a lost ack,
//     a consumer restart, a producer that published twice); fn did not run.
//
// When fn fails, or the commit does, nothing of the message was applied:
// Handle returns the error and the message must be redelivered (do not
// ack it; nak it, or let the broker's ack wait expire). After a deadlock
// or a serialization failure Handle runs the transaction, and fn, again
// itself, a few times.
//
// msgID is the message's own identity, the same in every delivery: the
// producer's message id (a header, an event id in the payload), not a
// delivery tag or a sequence number the broker gives each delivery.
func (i *Inbox[TTx]) Handle(ctx context.Context, msgID string, fn func(ctx context.Context, tx TTx) error) (res sqlonce.Result, err error) {
	op := obs.Start(i.observer, "inbox", "Handle", i.consumer, msgID)
	defer func() { err = op.End(ctx, res, err) }()
	if fn == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil fn", sqlonce.ErrInvalidArgument)
	}
	if err := keys.Check("message id", msgID); err != nil {
		return sqlonce.Result{}, err
	}
	// The Store's Run, which records no response for the inbox: it claims
	// the id as HandleTx does, in a transaction of its own; through pgx in
	// the round trips of the bare transaction (BEGIN travels with the
	// claim).
	return i.store.Run(obs.With(ctx, &op), dedupe.Request{Scope: i.consumer, Key: msgID}, func(ctx context.Context, tx TTx) ([]byte, error) {
		return nil, fn(ctx, tx)
	})
}

// HandleTx is Handle in the caller's transaction, for consumers that run
// their own: commit tx, then ack. On an error roll tx back and do not ack.
func (i *Inbox[TTx]) HandleTx(ctx context.Context, tx TTx, msgID string, fn func(ctx context.Context) error) (res sqlonce.Result, err error) {
	op := obs.Start(i.observer, "inbox", "HandleTx", i.consumer, msgID)
	defer func() { err = op.End(ctx, res, err) }()
	return i.handleTx(ctx, tx, msgID, fn, &op)
}

func (i *Inbox[TTx]) handleTx(ctx context.Context, tx TTx, msgID string, fn func(ctx context.Context) error, op *obs.Op) (sqlonce.Result, error) {
	if fn != nil && op.On() {
		inner := fn
		fn = func(ctx context.Context) error {
			op.WorkStart()
			defer op.WorkEnd()
			return inner(ctx)
		}
	}
	res, err := i.store.Do(ctx, tx, dedupe.Request{Scope: i.consumer, Key: msgID}, fn)
	op.Decided() // when fn did not run
	return res, err
}

// Purge deletes remembered message ids past their TTL, batch at a time
// (dedupe.DefaultPurgeBatch for 0), each batch in a transaction of its own
// on the driver's database handle, and
// reports how many it removed: run it from a periodic job. It purges
// expired keys of every dedupe store on the same table alike.
func (i *Inbox[TTx]) Purge(ctx context.Context, batch int) (n int64, err error) {
	op := obs.Start(i.observer, "inbox", "Purge", i.consumer, "")
	defer func() { op.Rows(n); err = op.Done(ctx, err) }()
	return i.store.Purge(ctx, batch)
}

// Inspect reads the remembered id msgID of the Inbox's consumer (never
// another consumer's, nor a key of dedupe or httpidem), on the driver's
// database handle: KeyDone once its message
// was applied, KeyExpired past the TTL. It returns an error matching
// sqlonce.ErrNotFound when the id is not remembered: never applied, purged
// or forgotten, or applied by a transaction that has not committed yet.
func (i *Inbox[TTx]) Inspect(ctx context.Context, msgID string) (info dedupe.KeyInfo, err error) {
	op := obs.Start(i.observer, "inbox", "Inspect", i.consumer, msgID)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	return i.store.Inspect(ctx, i.consumer, msgID)
}

// Forget deletes the remembered id msgID of the Inbox's consumer, on the
// driver's database handle, so that the next
// delivery of the message applies it again: to replay a message whose
// effect was lost or undone. It returns an error matching
// sqlonce.ErrNotFound when the id is not remembered. A message being
// applied is not remembered until its transaction commits: Forget cannot
// reach it.
func (i *Inbox[TTx]) Forget(ctx context.Context, msgID string) (err error) {
	op := obs.Start(i.observer, "inbox", "Forget", i.consumer, msgID)
	defer func() { err = op.Done(ctx, err, sqlonce.ErrNotFound) }()
	return i.store.Forget(ctx, i.consumer, msgID)
}
