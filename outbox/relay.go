package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// The relay's defaults, for the options left out.
const (
	DefaultBatchSize    = 100
	DefaultPollInterval = time.Second
	DefaultLease        = 30 * time.Second
	DefaultConcurrency  = 16
	DefaultMaxAttempts  = 10
	DefaultBackoff      = time.Second
	DefaultMaxBackoff   = 5 * time.Minute
	DefaultRetention    = 24 * time.Hour
)

// Bounds of the relay's options.
const (
	MaxBatchSize   = 1000
	MaxConcurrency = 1024
)

// purgeBatch is how many sent messages one purge transaction deletes:
// small, so that it holds few locks for long (the one writer, on SQLite).
const purgeBatch = 500

// maxPurgeInterval is the longest time between two purges of a relay.
const maxPurgeInterval = 10 * time.Minute

// ErrPermanent is matched by an error Permanent returns: a publish that
// will never succeed, parked at once instead of retried.
var ErrPermanent = errors.New("sqlonce/outbox: permanent publish failure")

// Permanent marks err, returned by a Publisher, as one that retrying
// cannot mend (a message the broker refuses for good): the relay parks
// the message at once. The result matches both ErrPermanent and err; a
// nil err gives ErrPermanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return &permanent{err}
}

type permanent struct{ err error }

func (p *permanent) Error() string   { return "permanent: " + p.err.Error() }
func (p *permanent) Unwrap() []error { return []error{ErrPermanent, p.err} }

// RelayOption adjusts Store.Relay; Relay applies the options before it
// starts and returns the first one's error.
type RelayOption func(*relayOptions) error

type relayOptions struct {
	batch, concurrency, attempts int
	poll, lease                  time.Duration
	backoff, maxBackoff          time.Duration
	retention                    time.Duration
}

// WithBatchSize sets how many messages the relay claims at a time, at
// most one per ordering key (DefaultBatchSize otherwise, and for 0;
// sqlonce.ErrInvalidArgument below 0 or over MaxBatchSize).
func WithBatchSize(n int) RelayOption {
	return func(o *relayOptions) error {
		if n == 0 {
			n = DefaultBatchSize
		}
		if n < 1 || n > MaxBatchSize {
			return fmt.Errorf("%w: outbox batch size %d is outside 1..%d", sqlonce.ErrInvalidArgument, n, MaxBatchSize)
		}
		o.batch = n
		return nil
	}
}

// WithPollInterval sets how long the relay waits between two claims that
// found nothing to publish (DefaultPollInterval otherwise, and for 0;
// sqlonce.ErrInvalidArgument below 1ms). Where the engine wakes the relay
// when a message commits (PostgreSQL's LISTEN/NOTIFY) the poll is the
// fallback; a claim that found messages is followed by another at once.
func WithPollInterval(d time.Duration) RelayOption {
	return func(o *relayOptions) error {
		if d == 0 {
			d = DefaultPollInterval
		}
		if d < time.Millisecond {
			return fmt.Errorf("%w: outbox poll interval %v is shorter than 1ms", sqlonce.ErrInvalidArgument, d)
		}
		o.poll = d
		return nil
	}
}

// WithLease sets how long a claimed message is the relay's (DefaultLease
// otherwise, and for 0; sqlonce.ErrInvalidArgument below 10ms). Its
// publish gets a context that ends four fifths of the way through the
// lease, so that the relay can mark it sent before another relay takes
// it over. A publish that overruns the lease anyway may be published
// again by another relay, and its own mark is then fenced (see Relay).
func WithLease(d time.Duration) RelayOption {
	return func(o *relayOptions) error {
		if d == 0 {
			d = DefaultLease
		}
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: outbox lease %v is shorter than 10ms", sqlonce.ErrInvalidArgument, d)
		}
		o.lease = d
		return nil
	}
}

// WithConcurrency sets how many publishes the relay runs at once, each of
// a different ordering key (DefaultConcurrency otherwise, and for 0;
// sqlonce.ErrInvalidArgument below 0 or over MaxConcurrency).
func WithConcurrency(n int) RelayOption {
	return func(o *relayOptions) error {
		if n == 0 {
			n = DefaultConcurrency
		}
		if n < 1 || n > MaxConcurrency {
			return fmt.Errorf("%w: outbox concurrency %d is outside 1..%d", sqlonce.ErrInvalidArgument, n, MaxConcurrency)
		}
		o.concurrency = n
		return nil
	}
}

// WithRetry sets the retry policy of a failed publish: the message is
// parked after maxAttempts failed publishes (DefaultMaxAttempts for 0),
// and until then published again after a pause that starts at backoff
// (DefaultBackoff for 0) and doubles with each failure up to maxBackoff
// (DefaultMaxBackoff for 0), each pause drawn at random between half and
// all of its bound. sqlonce.ErrInvalidArgument for a negative value, or a
// maxBackoff shorter than backoff.
func WithRetry(maxAttempts int, backoff, maxBackoff time.Duration) RelayOption {
	return func(o *relayOptions) error {
		if maxAttempts == 0 {
			maxAttempts = DefaultMaxAttempts
		}
		if backoff == 0 {
			backoff = DefaultBackoff
		}
		if maxBackoff == 0 {
			maxBackoff = max(DefaultMaxBackoff, backoff)
		}
		switch {
		case maxAttempts < 0:
			return fmt.Errorf("%w: outbox max attempts %d is negative", sqlonce.ErrInvalidArgument, maxAttempts)
		case backoff < 0:
			return fmt.Errorf("%w: outbox backoff %v is negative", sqlonce.ErrInvalidArgument, backoff)
		case maxBackoff < backoff:
			return fmt.Errorf("%w: outbox max backoff %v is shorter than the backoff %v", sqlonce.ErrInvalidArgument, maxBackoff, backoff)
		}
		o.attempts, o.backoff, o.maxBackoff = maxAttempts, backoff, maxBackoff
		return nil
	}
}

// WithRetention sets how long sent messages are kept before the relay
// purges them (DefaultRetention otherwise; 0 purges them at once;
// sqlonce.ErrInvalidArgument below 0). While a sent message is kept, its
// id cannot be enqueued again: Enqueue answers AlreadyDone or
// sqlonce.ErrKeyReuse.
func WithRetention(d time.Duration) RelayOption {
	return func(o *relayOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: outbox retention %v is negative", sqlonce.ErrInvalidArgument, d)
		}
		o.retention = d
		return nil
	}
}

// Relay publishes the outbox's messages through p until ctx ends, and
// then returns ctx's error; a nil p or a bad option returns an error
// matching sqlonce.ErrInvalidArgument at once. Start it in a goroutine of
// its own, in as many instances of a program as you like:
//
//	go store.Relay(ctx, publisher)
//
// Each round claims a batch of due messages in a transaction of its own
// (leases fenced by a token, rows other relays hold skipped), at most one
// per ordering key, publishes them at once (up to WithConcurrency), each
// with a context bounded by the lease, then marks the confirmed ones sent
// in one transaction and records each failure: the message is published
// again after a backoff, or parked after WithRetry's attempts or an error
// that matches ErrPermanent. A key's next message is claimed only once
// the one before it is sent, so the messages of one key reach p one after
// the other in their order; a parked message holds its key back until
// Redrive or Forget. Relays running at once share the work and never
// publish a message at the same time, unless a publish overruns its
// lease: another relay may then publish it again, and the overrunning
// relay's mark finds its lease taken over and changes nothing (reported,
// never an error that stops the relay). Errors of the database are
// reported and retried at the next round.
//
// A panic in p.Publish does not crash the program: the relay recovers it
// in the goroutine of that publish and counts it as a failed publish,
// whose error says "panic: " and the panic's value (Info.LastError, the
// Observer's "Publish" event), retried after a backoff and parked after
// WithRetry's attempts like any other failure.
//
// A round that claimed messages is followed by another at once (a claim
// holds at most one message per key: a backlog of few keys drains in
// rounds); after a claim that found none, the relay waits for
// WithPollInterval, or, where the engine can tell it that a message
// committed (PostgreSQL's LISTEN/NOTIFY, on a connection of its own; not
// through PgBouncer in transaction mode), until then. From time to time
// it deletes the messages sent longer than WithRetention ago, by its
// clock; the purges of several relays are idempotent. When ctx ends, the
// publishes in flight are cancelled and the messages they leave are
// published again once their lease lapses.
//
// The relay reports to the driver's Observer, Strategy "outbox":
// "Publish" for each publish (Attempts its number, 1 for the first;
// Status EventOK, or EventError with p's error, or EventLeaseLost when
// the failure could not be recorded because another relay took the
// message over), "Park" for a message parked (Err its last error),
// "LeaseLost" when messages p confirmed could not be marked sent because
// another relay took them over (Rows how many), "Purge" with the rows
// deleted, and "Claim", "MarkSent" and "Listen" for their failures.
func (s *Store[TTx]) Relay(ctx context.Context, p Publisher, opts ...RelayOption) error {
	if p == nil {
		return fmt.Errorf("%w: outbox relay: nil Publisher", sqlonce.ErrInvalidArgument)
	}
	if f, ok := p.(PublisherFunc); ok && f == nil {
		return fmt.Errorf("%w: outbox relay: nil PublisherFunc", sqlonce.ErrInvalidArgument)
	}
	o := relayOptions{
		batch: DefaultBatchSize, concurrency: DefaultConcurrency, attempts: DefaultMaxAttempts,
		poll: DefaultPollInterval, lease: DefaultLease,
		backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff, retention: DefaultRetention,
	}
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: relay option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	r := &relay[TTx]{s: s, p: p, o: o, wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	defer wg.Wait()
	if l := s.caps.OutboxListener; l != nil {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.listen(lctx, l)
		}()
	}
	return r.run(ctx)
}

type relay[TTx any] struct {
	s    *Store[TTx]
	p    Publisher
	o    relayOptions
	wake chan struct{}

	lastPurge time.Time
}

// now is the relay's clock: the one a test pinned in ctx, or the
// application's.
func now(ctx context.Context) time.Time {
	if t := testclock.Now(ctx); !t.IsZero() {
		return t
	}
	return time.Now()
}

func (r *relay[TTx]) run(ctx context.Context) error {
	poll := time.NewTimer(0)
	defer poll.Stop()
	<-poll.C
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		claimed, sent := r.round(ctx)
		r.purge(ctx, sent)
		if claimed {
			// More may be due: the next message of each key just sent,
			// the rest of a backlog larger than the batch. A message
			// that failed is due after its backoff, which the next
			// claim skips: it finds nothing, and the relay waits.
			continue
		}
		poll.Reset(r.o.poll)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.wake:
		case <-poll.C:
		}
		poll.Stop() // since Go 1.23, Reset after Stop sees no stale tick
	}
}

// signal wakes the relay's loop; it never blocks.
func (r *relay[TTx]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// listen runs the engine's listener until ctx ends, waking the loop on
// each notification, and restarts it after a failure with a growing
// pause. The loop polls meanwhile.
func (r *relay[TTx]) listen(ctx context.Context, l driver.OutboxListener) {
	const minPause, maxPause = 100 * time.Millisecond, 30 * time.Second
	var listening atomic.Bool
	pause := minPause
	for {
		listening.Store(false)
		err := l.OutboxListen(ctx, func() {
			listening.Store(true)
			// Messages committed while no one listened: claim them now.
			r.signal()
		}, r.signal)
		if ctx.Err() != nil || errors.Is(err, driver.ErrNoRun) {
			return
		}
		if err == nil {
			err = errors.New("the listener stopped")
		}
		if listening.Load() {
			pause = minPause // it listened: a new failure, not the same one again
		}
		op := obs.Start(r.s.observer, "outbox", "Listen", driver.OutboxChannel, "")
		op.Done(ctx, fmt.Errorf("sqlonce/outbox: listen: %w", err))
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}

// outcome is how one claimed message's publish went.
type outcome struct {
	c   driver.OutboxClaimed
	m   Message
	err error
	op  obs.Op
}

// round claims a batch, publishes it and records how each publish went.
// It reports whether the claim returned any message, and whether it
// marked any message sent.
func (r *relay[TTx]) round(ctx context.Context) (claimedAny, sent bool) {
	e := r.s.engine
	var (
		start   time.Time // before the claim's attempt that succeeded
		claimed []driver.OutboxClaimed
	)
	op := obs.Start(r.s.observer, "outbox", "Claim", "", "")
	err := owntx.RunObserved(ctx, e, &op, func(ctx context.Context, tx TTx) error {
		start = time.Now()
		var err error
		claimed, err = e.OutboxClaim(ctx, tx, r.o.batch, r.o.lease, testclock.Now(ctx))
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			op.Done(ctx, fmt.Errorf("sqlonce/outbox: claim: %w", err))
		}
		return false, false
	}
	if len(claimed) == 0 {
		return false, false
	}

	// Publish, at most concurrency at once, each within four fifths of
	// the lease, counted from before the claim's transaction began.
	pctx, cancel := context.WithDeadline(ctx, start.Add(r.o.lease-r.o.lease/5))
	defer cancel()
	outs := make([]outcome, len(claimed))
	sem := make(chan struct{}, r.o.concurrency)
	var wg sync.WaitGroup
	for i, c := range claimed {
		o := &outs[i]
		o.c = c
		o.op = obs.Start(r.s.observer, "outbox", "Publish", c.Topic, c.ID)
		o.op.Attempt(int(c.Attempts) + 1)
		m, err := decode(c.OutboxMessage)
		if err != nil {
			o.err = Permanent(err)
			continue
		}
		o.m = m
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			o.op.WorkStart()
			o.err = publish(pctx, r.p, o.m)
			o.op.WorkEnd()
		}()
	}
	wg.Wait()

	// The confirmed messages are marked sent even when ctx ended
	// meanwhile: the broker has them. The mark is worth its wait past the
	// lease too (fenced by the token, it holds while no relay took the
	// message over): bounded by the lease, or markWait when longer, so a
	// short lease on a busy database does not turn every mark into a
	// republish.
	mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.o.lease, markWait))
	defer mcancel()
	var leases []driver.OutboxLease
	for _, o := range outs {
		if o.err == nil {
			leases = append(leases, o.c.OutboxLease)
		}
	}
	if len(leases) > 0 {
		var n int64
		err := owntx.Run(mctx, e, func(ctx context.Context, tx TTx) error {
			var err error
			n, err = e.OutboxSent(ctx, tx, leases, testclock.Now(ctx))
			return err
		})
		switch {
		case err != nil:
			// Left leased: published again once the lease lapses.
			lop := obs.Start(r.s.observer, "outbox", "MarkSent", "", "")
			lop.Rows(int64(len(leases)))
			lop.Done(ctx, fmt.Errorf("sqlonce/outbox: mark %d messages sent: %w", len(leases), err))
		case n < int64(len(leases)):
			lop := obs.Start(r.s.observer, "outbox", "LeaseLost", "", "")
			lop.Rows(int64(len(leases)) - n)
			lop.Done(ctx, fmt.Errorf("%w: %d of %d messages published were taken over by another relay before they were marked sent", sqlonce.ErrLeaseLost, int64(len(leases))-n, len(leases)))
		}
		sent = err == nil && n > 0
	}
	for i := range outs {
		r.record(ctx, mctx, &outs[i])
	}
	return true, sent
}

// markWait is the least time a relay gives the mark of its confirmed
// messages as sent.
const markWait = 5 * time.Second

// publish calls p.Publish(ctx, m), and turns a panic in it into the
// publish's error, "panic: " and the value: a failed publish, retried and
// parked like any other, that does not bring the program down.
func publish(ctx context.Context, p Publisher, m Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return p.Publish(ctx, m)
}

// record reports a publish, and records it when it failed.
func (r *relay[TTx]) record(ctx, mctx context.Context, o *outcome) {
	attempt := int(o.c.Attempts) + 1
	op := &o.op
	if o.err == nil {
		op.Done(ctx, nil)
		return
	}
	if ctx.Err() != nil {
		// The relay is stopping: the publish was cut short, not failed.
		// The message is published again once its lease lapses.
		op.Done(ctx, o.err)
		return
	}
	park := attempt >= r.o.attempts || errors.Is(o.err, ErrPermanent)
	var retryAt time.Time
	if !park {
		retryAt = now(ctx).Add(r.backoff(attempt))
	}
	e := r.s.engine
	var held bool
	err := owntx.Run(mctx, e, func(ctx context.Context, tx TTx) error {
		var err error
		held, err = e.OutboxFailed(ctx, tx, o.c.OutboxLease, errText(o.err), retryAt, park, testclock.Now(ctx))
		return err
	})
	switch {
	case err != nil:
		op.Done(ctx, fmt.Errorf("sqlonce/outbox: publish of message %q failed (%w), and recording the failure failed too: %w", o.c.ID, o.err, err))
	case !held:
		op.Done(ctx, fmt.Errorf("%w: message %q was taken over by another relay while its publish failed: %w", sqlonce.ErrLeaseLost, o.c.ID, o.err))
	default:
		op.Done(ctx, o.err)
		if park {
			pop := obs.Start(r.s.observer, "outbox", "Park", o.c.Topic, o.c.ID)
			pop.Attempt(attempt)
			pop.Done(ctx, fmt.Errorf("sqlonce/outbox: message %q parked after %d attempts: %w", o.c.ID, attempt, o.err))
		}
	}
}

// backoff is the pause before publish attempt+1: a random moment between
// half and all of a bound that doubles from the initial backoff up to the
// maximum.
func (r *relay[TTx]) backoff(attempt int) time.Duration {
	d := r.o.backoff
	for i := 1; i < attempt && d < r.o.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.o.maxBackoff)
	return d/2 + rand.N(d/2+1)
}

// purge deletes the messages sent longer than the retention ago when it
// is time: after a round that sent messages when the retention is 0,
// otherwise every tenth of the retention (at least the poll interval, at
// most maxPurgeInterval).
func (r *relay[TTx]) purge(ctx context.Context, sent bool) {
	if ctx.Err() != nil {
		return
	}
	every := min(max(r.o.retention/10, r.o.poll), maxPurgeInterval)
	t := time.Now()
	if !(sent && r.o.retention == 0) && !r.lastPurge.IsZero() && t.Sub(r.lastPurge) < every {
		return
	}
	r.lastPurge = t
	e := r.s.engine
	before := now(ctx).Add(-r.o.retention)
	op := obs.Start(r.s.observer, "outbox", "Purge", "", "")
	total, err := owntx.Purge(ctx, purgeBatch, func(limit int) (int64, error) {
		var n int64
		err := owntx.Run(ctx, e, func(ctx context.Context, tx TTx) error {
			var err error
			n, err = e.OutboxPurge(ctx, tx, limit, before)
			return err
		})
		return n, err
	})
	if ctx.Err() != nil {
		return
	}
	op.Rows(total)
	if err != nil {
		err = fmt.Errorf("sqlonce/outbox: purge: %w", err)
	}
	op.Done(ctx, err)
}
