package dedupe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// purgerKey is the row of sqlonce_keys whose lease elects the purging
// instance: one for the whole table, whichever Store runs PurgeEvery,
// since a purge deletes the expired keys of every Store.
var purgerKey = driver.Key{Namespace: driver.NamespacePurger, Scope: "purger", Key: "sqlonce_keys"}

// PurgeOption adjusts Store.PurgeEvery.
type PurgeOption func(*purgeOptions) error

type purgeOptions struct{ batch int }

// PurgeBatch sets how many keys each of PurgeEvery's transactions deletes:
// DefaultPurgeBatch otherwise, and for 0; at most 100000
// (sqlonce.ErrInvalidArgument above it or below 0).
func PurgeBatch(n int) PurgeOption {
	return func(o *purgeOptions) error {
		if n == 0 {
			n = DefaultPurgeBatch
		}
		if err := owntx.CheckPurge("batch", n); err != nil {
			return err
		}
		o.batch = n
		return nil
	}
}

// PurgeEvery deletes expired keys every interval, as Purge does, until
// ctx is done, and then returns ctx's error; bad input (an interval under
// a millisecond, a bad option) returns an error matching
// sqlonce.ErrInvalidArgument at once. Start it once per program, in a
// goroutine of its own:
//
//	go store.PurgeEvery(ctx, 10*time.Minute)
//
// Every instance of a program may run it: they elect one among them
// that purges, and the others skip. The election is a lease on a row of
// sqlonce_keys itself (no advisory lock, no session state, so it works
// through PgBouncer's transaction pooling, on MariaDB Galera and on
// SQLite alike), taken for two intervals. At each tick an instance that
// holds no lease tries to claim it: the one that gets it purges, the
// others skip this round. The holder keeps the lease as long as it keeps
// purging, each round extending it by two intervals from then, so a round
// that starts late (a busy machine, a slow statement) does not lose it;
// another instance takes it over only once it has lapsed, when its holder
// stopped or stalled for longer than an interval. The lease's fencing
// token guards every batch: each batch's transaction first extends the
// lease with the holder's token, and a holder whose lease was taken over
// stops at its next batch with nothing deleted, while a takeover waits
// for a batch in progress to end. So two instances never purge at once; the keys one round
// leaves (a round stops at ctx's end or at an error) the next takes.
// The purge covers sqlonce_keys (every Store's keys, inbox's and
// httpidem's included); token.Store.Purge is separate.
//
// Each round is reported to the driver's Observer as an Event with
// Operation "PurgeEvery": outcome EventFirstRun and the keys deleted in
// Rows when this instance purged, EventAlreadyDone when another holds
// the lease, EventLeaseLost when the lease was taken over during the
// round, EventError with the error otherwise. A round that fails is
// reported and the next tick tries again: attach an Observer to see the
// errors. It needs a driver built with a database handle
// (sqlonce.ErrNoDB, in every round, otherwise).
//
// Keep interval well above the time a batch takes. A round's work is
// bounded by the expired keys it finds; the cron job or the sqlonce
// purge command, on one node, does the same job from outside.
func (s *Store[TTx]) PurgeEvery(ctx context.Context, interval time.Duration, opts ...PurgeOption) error {
	if interval < time.Millisecond {
		return fmt.Errorf("%w: purge interval %v is shorter than 1ms", sqlonce.ErrInvalidArgument, interval)
	}
	o := purgeOptions{batch: DefaultPurgeBatch}
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: purge option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return err
		}
	}
	lease := purgerLeaseFor(interval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var token int64 // the lease this instance holds, 0 for none
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		token = s.purgeRound(ctx, lease, o.batch, token)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// purgerLeaseFor is how long PurgeEvery's lease lasts for an interval:
// two of them. Taken for one interval only, the lease would lapse at the
// very tick the holder extends it, and any instance whose tick came a
// moment earlier would take it over: the lease would hop from instance to
// instance on a busy machine.
func purgerLeaseFor(interval time.Duration) time.Duration { return 2 * interval }

// purgeRound runs one round of PurgeEvery: it keeps or takes the lease
// (for lease), purges if it holds it, reports the round, and returns the
// token it holds afterwards (0 for none).
func (s *Store[TTx]) purgeRound(ctx context.Context, lease time.Duration, batch int, token int64) int64 {
	op := obs.Start(s.observer, "dedupe", "PurgeEvery", "", "")
	var (
		total int64
		res   sqlonce.Result
		err   error
	)
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// Stopped mid-round: database/sql rolls a transaction back
			// when its context ends, and the round's next statement
			// answers ErrTxDone. The round was cancelled, not failed.
			err = errors.Join(ctx.Err(), err)
		}
		op.Rows(total)
		op.End(ctx, res, err)
	}()
	held, err := s.electLease(ctx, purgerKey, lease, token, &op)
	if err != nil {
		return token // kept: the next round tries it again
	}
	if token = held; token == 0 {
		res.Outcome = sqlonce.AlreadyDone
		return 0
	}
	op.Decided()
	total, err = owntx.Purge(ctx, batch, func(limit int) (int64, error) {
		var n int64
		err := owntx.Run(ctx, s.engine, func(ctx context.Context, tx TTx) error {
			// The lease row stays locked until this transaction ends: a
			// takeover waits for the batch, then finds the lease held.
			ok, err := s.engine.Extend(ctx, tx, purgerKey, token, lease, testclock.Now(ctx))
			switch {
			case err != nil:
				return fmt.Errorf("sqlonce/dedupe: purger lease: %w", err)
			case !ok:
				return fmt.Errorf("%w: the purger's lease (token %d) was taken over", sqlonce.ErrLeaseLost, token)
			}
			n, err = s.purgeTx(ctx, tx, limit)
			return err
		})
		return n, err
	})
	if err != nil {
		if errors.Is(err, sqlonce.ErrLeaseLost) {
			token = 0
		}
		return token
	}
	res.Outcome = sqlonce.FirstRun
	return token
}

// electLease returns the token of the lease on key (the purger's, the
// completer's) when this instance holds it: the one it held (token),
// extended, or one it claimed now, for lease; 0 when another instance
// holds it.
func (s *Store[TTx]) electLease(ctx context.Context, key driver.Key, lease time.Duration, token int64, op *obs.Op) (int64, error) {
	var held int64
	err := owntx.RunStatements(ctx, s.engine, op, func(ctx context.Context, tx TTx) error {
		now := testclock.Now(ctx)
		held = 0
		if token != 0 {
			ok, err := s.engine.Extend(ctx, tx, key, token, lease, now)
			if err != nil || ok {
				held = token
				return err
			}
		}
		c, err := s.engine.Claim(ctx, tx, driver.ClaimParams{Key: key, TTL: lease, Lease: lease, Now: now})
		if err == nil && c.Won {
			held = c.Token
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlonce/dedupe: %s lease: %w", key.Scope, err)
	}
	return held, nil
}
