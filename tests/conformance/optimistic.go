package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// addAmount is the versioned relative update every optimistic case makes:
// amount += delta where version = expected, judged by optimistic.Update
// with read as the version read.
func addAmount(ctx context.Context, b harness.Biz, id, expected, delta int64, read func(context.Context, int64) (int64, error)) (sqlonce.Result, error) {
	rows, err := b.OrderAddAmount(ctx, id, expected, delta)
	if err != nil {
		return sqlonce.Result{}, err
	}
	return optimistic.Update(ctx, rows, expected, func(ctx context.Context) (int64, error) { return read(ctx, id) })
}

// newOrder inserts an order (version 1) on the pool and returns its id.
func newOrder[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], code string, amount int64) int64 {
	t.Helper()
	id, err := db.Pool().OrderInsert(ctx, code, code, amount)
	must(t, err)
	return id
}

func wantOrder[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], id, amount, version int64) {
	t.Helper()
	o, err := db.Pool().OrderGetByID(ctx, id)
	must(t, err)
	if o.Amount != amount || o.Version != version {
		t.Fatalf("order %d: amount %d version %d, want amount %d version %d", id, o.Amount, o.Version, amount, version)
	}
}

func runOptimistic[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "o-1", 100)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var res sqlonce.Result
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				b := db.Tx(tx)
				res, err = addAmount(ctx, b, id, 1, 10, b.OrderGetVersion)
				return err
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
		}
		wantOrder(t, ctx, db, id, 110, 2)
	})

	t.Run("NotFound", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		id := newOrder(t, ctx, db, "o-gone", 100)
		n, err := db.Pool().OrderDelete(ctx, id)
		must(t, err)
		if n != 1 {
			t.Fatalf("deleted %d rows", n)
		}
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			b := db.Tx(tx)
			_, err := addAmount(ctx, b, id, 1, 10, b.OrderGetVersion)
			return err
		})
		if !errors.Is(err, sqlonce.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		if sqlonce.IsRetryable(err) {
			t.Fatalf("ErrNotFound is retryable: %v", err)
		}
		total, err := db.Pool().OrderCount(ctx)
		must(t, err)
		if total != 0 {
			t.Fatalf("%d orders, want 0", total)
		}
	})

	t.Run("TooManyRows", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		a := newOrder(t, ctx, db, "o-a", 100)
		b := newOrder(t, ctx, db, "o-b", 200)
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			q := db.Tx(tx)
			rows, err := q.OrderAddAmountAll(ctx, 1, 10)
			if err != nil {
				return err
			}
			if rows != 2 {
				return fmt.Errorf("update touched %d rows, want 2", rows)
			}
			_, err = optimistic.Update(ctx, rows, 1, func(ctx context.Context) (int64, error) { return q.OrderGetVersion(ctx, a) })
			return err
		})
		if !errors.Is(err, sqlonce.ErrTooManyRows) {
			t.Fatalf("got %v, want ErrTooManyRows", err)
		}
		// The caller rolled back on the error: neither row moved.
		wantOrder(t, ctx, db, a, 100, 1)
		wantOrder(t, ctx, db, b, 200, 1)
	})

	t.Run("SnapshotTrap", func(t *testing.T) { runOptimisticSnapshotTrap(t, f) })

	t.Run("ClientFoundRows", func(t *testing.T) {
		// MySQL reports changed rows unless clientFoundRows=true; the
		// version bump always changes the row, so optimistic gives the same
		// answers either way. PostgreSQL always reports matched rows.
		ctx := ctxT(t)
		db := f(t, 2)
		found, err := harness.Reopen(t, db, 2, harness.Settings{MySQL: map[string]string{"clientFoundRows": "true"}})
		must(t, err)
		for _, v := range []struct {
			name          string
			db            harness.DB[TTx]
			foundRows     bool
			unchangedRows int64 // what an UPDATE that leaves its row as it was reports
		}{
			{"default", db, false, map[string]int64{"postgres": 1, "mysql": 0, "sqlite": 1}[db.Dialect()]},
			{"clientFoundRows=true", found, true, 1},
		} {
			t.Run(v.name, func(t *testing.T) {
				code := "o-" + v.name
				id := newOrder(t, ctx, v.db, code, 100)
				p := v.db.Pool()
				for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
					res, err := addAmount(ctx, p, id, 1, 10, p.OrderGetVersion)
					must(t, err)
					if res.Outcome != want {
						t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
					}
				}
				wantOrder(t, ctx, v.db, id, 110, 2)
				// Why the version must change: an UPDATE that matches its
				// row but writes the values it already has reports 0 on
				// MySQL without clientFoundRows, which would read as
				// "matched nothing".
				rows, err := p.OrderSetStatus(ctx, id, "created", "created")
				must(t, err)
				if rows != v.unchangedRows {
					t.Fatalf("unchanged row reported %d, want %d", rows, v.unchangedRows)
				}
			})
		}
	})

	t.Run("Race", func(t *testing.T) {
		runLevels(t, f, Racers+4, func(t *testing.T, db harness.DB[TTx], iso harness.Isolation) {
			ctx := ctxT(t)
			id := newOrder(t, ctx, db, "o-race", 0)
			var (
				c       counter
				retries atomic.Int64
			)
			errs := race(Racers, func(int) error {
				var res sqlonce.Result
				n, err := retryTx(ctx, db, iso, func(tx TTx) error {
					b := db.Tx(tx)
					// Read first, as a caller computing its update does,
					// and take a moment: the snapshots overlap, so the
					// levels that refuse stale writes do refuse some.
					if _, err := b.OrderGetVersionSnapshot(ctx, id); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
					var err error
					res, err = addAmount(ctx, b, id, 1, 10, b.OrderGetVersion)
					return err
				})
				retries.Add(int64(n))
				if err == nil {
					c.add(res) // the outcome of the attempt that committed
				}
				return err
			})
			noErrors(t, errs)
			wantOrder(t, ctx, db, id, 10, 2)
			if c.first.Load() != 1 || c.done.Load() != int64(Racers)-1 {
				t.Fatalf("%s, want first=1 done=%d", &c, Racers-1)
			}
			t.Logf("%s: %s, %d retries", iso, &c, retries.Load())
		})
	})
}

// runOptimisticSnapshotTrap: a transaction reads the version (1), another
// commits version 2, then the first runs its versioned update. What the
// version read after a 0-row update sees depends on the database, the
// level and the kind of read; every outcome must be AlreadyDone or an
// error sqlonce.IsRetryable accepts, never FirstRun or a plain failure.
func runOptimisticSnapshotTrap[TTx any](t *testing.T, f harness.Factory[TTx]) {
	type outcome string
	const (
		done        outcome = "AlreadyDone"
		staleRead   outcome = "ErrStaleRead"     // the read saw the snapshot
		writeRefuse outcome = "update retryable" // the UPDATE itself refused (40001, 1020)
		// MySQL's SERIALIZABLE makes the first read a locking read: the
		// other writer waits for this transaction and gives up (1205),
		// and this transaction's update goes first.
		writerBlocked outcome = "writer blocked"
	)
	type want struct{ postgres, mysql outcome }
	for _, tc := range []struct {
		level    string
		iso      harness.Isolation
		snapshot bool // read with a plain SELECT on MySQL, not LOCK IN SHARE MODE
		want     want
	}{
		{"READ COMMITTED", harness.ReadCommitted, true, want{done, done}},
		{"READ COMMITTED", harness.ReadCommitted, false, want{done, done}},
		// The trap: MySQL's UPDATE sees the newest version and matches
		// nothing, its plain SELECT still sees 1.
		{"REPEATABLE READ", harness.RepeatableRead, true, want{writeRefuse, staleRead}},
		{"REPEATABLE READ", harness.RepeatableRead, false, want{writeRefuse, done}},
		{"SERIALIZABLE", harness.Serializable, true, want{writeRefuse, writerBlocked}},
		{"SERIALIZABLE", harness.Serializable, false, want{writeRefuse, writerBlocked}},
		{StrictSnapshot, harness.RepeatableRead, true, want{writeRefuse, writeRefuse}},
		{StrictSnapshot, harness.RepeatableRead, false, want{writeRefuse, writeRefuse}},
	} {
		read := "locking read"
		if tc.snapshot {
			read = "snapshot read"
		}
		t.Run(tc.level+"/"+read, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 2)
			if tc.level == StrictSnapshot {
				db = strictSnapshot(t, db, 2)
			}
			// The other writer gives up after a second instead of waiting
			// out the server's default for a lock this test holds.
			writer, err := harness.Reopen(t, db, 1, harness.Settings{
				MySQL:    map[string]string{"innodb_lock_wait_timeout": "1"},
				Postgres: map[string]string{"lock_timeout": "1s"},
			})
			must(t, err)
			w := tc.want.postgres
			switch db.Dialect() {
			case "mysql":
				w = tc.want.mysql
			case "sqlite":
				// Every level but Default begins DEFERRED: the update on a
				// stale snapshot fails with SQLITE_BUSY_SNAPSHOT.
				w = writeRefuse
			}
			id := newOrder(t, ctx, db, "o-trap", 100)
			tx, err := db.Begin(ctx, tc.iso)
			must(t, err)
			defer func() { _ = db.Rollback(ctx, tx) }()
			b := db.Tx(tx)
			readVersion := b.OrderGetVersion
			if tc.snapshot {
				readVersion = b.OrderGetVersionSnapshot
			}
			// Read the version first, as an optimistic caller does; this
			// also takes MySQL's snapshot, which starts at the first read.
			v, err := b.OrderGetVersionSnapshot(ctx, id)
			must(t, err)
			if v != 1 {
				t.Fatalf("version %d, want 1", v)
			}
			wp := writer.Pool()
			other, otherErr := addAmount(ctx, wp, id, 1, 5, wp.OrderGetVersion)
			blocked := otherErr != nil
			if blocked && !sqlonce.IsRetryable(otherErr) {
				t.Fatalf("concurrent writer: %v", otherErr)
			}
			if !blocked && !other.FirstRun() {
				t.Fatalf("concurrent writer: %v", other)
			}

			rows, err := b.OrderAddAmount(ctx, id, v, 10)
			var res sqlonce.Result
			var got outcome
			switch {
			case err != nil:
				got = writeRefuse
				if !sqlonce.IsRetryable(err) {
					t.Fatalf("update: %v is not retryable", err)
				}
			default:
				res, err = optimistic.Update(ctx, rows, v, func(ctx context.Context) (int64, error) { return readVersion(ctx, id) })
				switch {
				case err == nil && res.FirstRun() && blocked:
					got = writerBlocked
				case err == nil && res.AlreadyDone():
					got = done
				case errors.Is(err, sqlonce.ErrStaleRead) && sqlonce.IsRetryable(err):
					got = staleRead
				default:
					t.Fatalf("rows %d: got %v, %v", rows, res, err)
				}
			}
			if got != w {
				t.Fatalf("got %s (%v), want %s", got, err, w)
			}
			t.Logf("%s: %v", got, errors.Join(err, otherErr))
			if got == writerBlocked {
				must(t, db.Commit(ctx, tx))
				wantOrder(t, ctx, db, id, 110, 2)
				return
			}
			_ = db.Rollback(ctx, tx)

			// Retrying the transaction, as IsRetryable says, resolves it:
			// a fresh snapshot sees version 2.
			var retry sqlonce.Result
			must(t, harness.WithTx(ctx, db, tc.iso, func(tx TTx) error {
				b := db.Tx(tx)
				read := b.OrderGetVersion
				if tc.snapshot {
					read = b.OrderGetVersionSnapshot
				}
				var err error
				retry, err = addAmount(ctx, b, id, v, 10, read)
				return err
			}))
			if !retry.AlreadyDone() {
				t.Fatalf("retry: %v, want AlreadyDone", retry)
			}
			wantOrder(t, ctx, db, id, 105, 2)
		})
	}
}
