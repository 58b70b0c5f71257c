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
var purgerKey = driver.Key{Namespace: driver.NamespaceElection, Scope: "purger", Key: "sqlonce_keys"}

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
// sqlonce.ErrInvalidArgument at once. Start it in a goroutine of its own,
// in every instance of a program:
//
//	go store.PurgeEvery(ctx, 10*time.Minute)
//
// The instances elect one that purges and the others skip: the election
// is a lease on a row of sqlonce_keys, fenced by its token, and it needs
// no advisory lock or session state (it works through PgBouncer, on
// Galera and on SQLite). Each batch deletes first and extends the lease
// last, in one transaction: it commits only while its instance holds the
// lease, so two instances' purges never both take effect. The lease lasts
// two intervals; a holder that stops, or stalls (inside a batch too) for
// longer, is taken over, and the stalled round's batch then rolls back
// and the round reports EventLeaseLost. Caveats: on SQLite, whose one
// writer a batch holds, a holder stalled inside a batch stalls every
// instance; on MySQL and MariaDB the batch's range scan on expires_at can
// lock the election row, so a takeover can wait for a stalled batch;
// through vtgate a batch deletes shard by shard in autocommit, so a
// holder taken over has already committed its deletes (harmless: deleting
// expired keys twice is idempotent) and two instances can purge at once
// there. The purge covers sqlonce_keys (inbox's and httpidem's keys
// included); token.Store.Purge is separate.
//
// Each round is reported to the driver's Observer as an Event with
// Operation "PurgeEvery": EventFirstRun with the keys deleted in Rows when
// this instance purged, EventAlreadyDone when another holds the lease,
// EventLeaseLost when the lease was taken over during the round,
// EventError otherwise; a failed round is retried at the next tick.
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
			var err error
			if n, err = s.purgeTx(ctx, tx, limit); err != nil {
				return err
			}
			// The lease is extended last, which locks its row until
			// COMMIT: a batch commits only while this instance holds the
			// lease, and a batch whose lease was taken over while it ran
			// (a holder stalled for longer than the lease) rolls back
			// with ErrLeaseLost. Extended first, the row would stay
			// locked for the whole batch, and a stalled holder could
			// never be taken over: the takeover would wait for it.
			ok, err := s.engine.Extend(ctx, tx, purgerKey, token, lease, testclock.Now(ctx))
			switch {
			case err != nil:
				return fmt.Errorf("sqlonce/dedupe: purger lease: %w", err)
			case !ok:
				n = 0
				return fmt.Errorf("%w: the purger's lease (token %d) was taken over", sqlonce.ErrLeaseLost, token)
			}
			return nil
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
// resumer's) when this instance holds it: the one it held (token),
// extended, or one it claimed now, for lease; 0 when another instance
// holds it.
func (s *Store[TTx]) electLease(ctx context.Context, key driver.Key, lease time.Duration, token int64, op *obs.Op) (int64, error) {
	var held int64
	err := owntx.RunStatements(ctx, s.engine, s.caps.Autocommitter, op, func(ctx context.Context, tx TTx) error {
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
