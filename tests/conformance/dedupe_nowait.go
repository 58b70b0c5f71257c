package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// lockWaitSetting reads tx's lock wait setting: lock_timeout on PostgreSQL,
// the session's innodb_lock_wait_timeout on MySQL/MariaDB.
func lockWaitSetting[TTx any](ctx context.Context, dialect string, tx TTx) (string, error) {
	var v string
	switch tx := any(tx).(type) {
	case pgx.Tx:
		return v, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&v)
	case *sql.Tx:
		if dialect == "postgres" {
			return v, tx.QueryRowContext(ctx, "SHOW lock_timeout").Scan(&v)
		}
		return v, tx.QueryRowContext(ctx, "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS CHAR)").Scan(&v)
	}
	return "", fmt.Errorf("no lock wait setting for %T", tx)
}

// setLockWait gives tx a lock wait setting no default has (for the rest of
// the transaction on PostgreSQL, of the session on MySQL), so that a check
// afterwards shows it was restored rather than reset, and returns the value
// lockWaitSetting reads for it.
func setLockWait[TTx any](ctx context.Context, dialect string, tx TTx) (string, error) {
	switch tx := any(tx).(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '4321ms'")
		return "4321ms", err
	case *sql.Tx:
		if dialect == "postgres" {
			_, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = '4321ms'")
			return "4321ms", err
		}
		_, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 43")
		return "43", err
	}
	return "", fmt.Errorf("no lock wait setting for %T", tx)
}

func wantLockWait[TTx any](t testing.TB, ctx context.Context, dialect string, tx TTx, what, want string) {
	t.Helper()
	got, err := lockWaitSetting(ctx, dialect, tx)
	must(t, err)
	if got != want {
		t.Fatalf("%s: lock wait setting %q, want %q restored", what, got, want)
	}
}

// holdKey claims req in a transaction it leaves open (its work writes a
// ledger row), and returns it.
func holdKey[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) TTx {
	t.Helper()
	tx, err := db.Begin(ctx, harness.Default)
	must(t, err)
	t.Cleanup(func() { _ = db.Rollback(context.Background(), tx) })
	res, err := s.Do(ctx, tx, req, func(ctx context.Context) error {
		return db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
	})
	wantOutcome(t, "holder", res, err, sqlonce.FirstRun, nil)
	return tx
}

func runDedupeNoWait[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("InProgressLeavesTxUsable", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 6)
				skipOnSQLite(t, db, sqliteNoKeyWait)
				s, err := dedupe.New(db.Driver(), dedupe.WithNoWait())
				must(t, err)
				req := dedupe.Request{Scope: "nowait", Key: "k"}
				tx1 := holdKey(t, ctx, db, s, req)

				tx2, err := db.Begin(ctx, iso)
				must(t, err)
				defer func() { _ = db.Rollback(context.Background(), tx2) }()
				biz := db.Tx(tx2)
				must(t, biz.LedgerInsert(ctx, "before", 1))
				want, err := setLockWait(ctx, db.Dialect(), tx2)
				must(t, err)

				ran := false
				start := time.Now()
				_, err = s.Do(ctx, tx2, req, func(ctx context.Context) error {
					ran = true
					return biz.LedgerInsert(ctx, req.Key, 1)
				})
				elapsed := time.Since(start)
				if !errors.Is(err, sqlonce.ErrInProgress) {
					t.Fatalf("duplicate while held: %v, want ErrInProgress", err)
				}
				if sqlonce.IsRetryable(err) {
					t.Errorf("ErrInProgress reported retryable, but the transaction is usable: %v", err)
				}
				if ran {
					t.Fatal("fn ran for a key held by another transaction")
				}
				// A claim that waited would wait for innodb_lock_wait_timeout
				// (50 s) or forever: the bound is loose for a loaded machine.
				if elapsed > 10*time.Second {
					t.Errorf("no-wait claim took %v", elapsed)
				}
				wantLockWait(t, ctx, db.Dialect(), tx2, "after ErrInProgress", want)

				// The transaction goes on: more writes, another claim.
				must(t, biz.LedgerInsert(ctx, "after", 1))
				other := dedupe.Request{Scope: "nowait", Key: "other"}
				res, err := s.Do(ctx, tx2, other, func(ctx context.Context) error {
					return biz.LedgerInsert(ctx, other.Key, 1)
				})
				wantOutcome(t, "another key in the same transaction", res, err, sqlonce.FirstRun, nil)
				wantLockWait(t, ctx, db.Dialect(), tx2, "after a claim that won", want)
				must(t, db.Commit(ctx, tx2))
				must(t, db.Commit(ctx, tx1))

				// A repeat finds the key done: the path that reads it back
				// restores the setting too.
				must(t, harness.WithTx(ctx, db, iso, func(tx TTx) error {
					want, err := setLockWait(ctx, db.Dialect(), tx)
					if err != nil {
						return err
					}
					res, err := s.Do(ctx, tx, req, func(context.Context) error { return errors.New("ran again") })
					wantOutcome(t, "repeat after commit", res, err, sqlonce.AlreadyDone, nil)
					wantLockWait(t, ctx, db.Dialect(), tx, "after a claim that found the key done", want)
					return nil
				}))

				per, err := db.Pool().LedgerCountPerRef(ctx)
				must(t, err)
				for ref, n := range map[string]int64{"k": 1, "before": 1, "after": 1, "other": 1} {
					if per[ref] != n {
						t.Errorf("ledger %s: %d rows, want %d (all: %v)", ref, per[ref], n, per)
					}
				}
			})
		}
	})

	t.Run("InProgressDuringTakeover", func(t *testing.T) {
		// The key is expired and another transaction is taking it over: the
		// claim waits on that row's lock, not on the unique index.
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteNoKeyWait)
		s, err := dedupe.New(db.Driver(), dedupe.WithNoWait(), dedupe.WithTTL(time.Minute))
		must(t, err)
		t0 := clockBase()
		req := dedupe.Request{Scope: "nowait", Key: "expired"}
		res, err := doRecord(at(ctx, t0, 0), db, s, req, "old")
		wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
		late := at(ctx, t0, time.Hour)
		tx1 := holdKey(t, late, db, s, req)

		start := time.Now()
		_, err = doRecord(late, db, s, req, "never")
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("claim during a takeover: %v, want ErrInProgress", err)
		}
		// Waiting would take 50 s or forever.
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Errorf("no-wait claim took %v", elapsed)
		}
		must(t, db.Commit(late, tx1))
		res, err = doRecord(late, db, s, req, "never")
		wantOutcome(t, "after the takeover committed", res, err, sqlonce.AlreadyDone, nil)
		if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
			t.Fatalf("ledger rows: %d, want 2", n)
		}
	})

	t.Run("WaitsOutATableLock", func(t *testing.T) {
		// PostgreSQL's lock_timeout, the bound of a claim that must not
		// wait, bounds every lock wait of the claim's statement: the
		// table's lock too (a DDL statement, VACUUM truncating the table's
		// end, LOCK TABLE), and the lock on growing the table's file. A
		// key nobody holds is no key in progress: the claim waits those
		// out and runs.
		for _, viaRun := range []bool{false, true} {
			name := "Do"
			if viaRun {
				name = "Run"
			}
			t.Run(name, func(t *testing.T) {
				ctx, db, s, req := tableLockCase(t, f, name)
				var err error
				const hold = 300 * time.Millisecond
				released := lockKeyTable(t, ctx, db, hold)

				var calls atomic.Int64
				start := time.Now()
				var res sqlonce.Result
				if viaRun {
					res, err = s.Run(ctx, req, drWork(db, req.Key, []byte("ran"), &calls))
				} else {
					res, err = doNoWait(ctx, db, s, req, &calls)
				}
				elapsed := time.Since(start)
				must(t, <-released)
				wantOutcome(t, "a claim while the key table was locked", res, err, sqlonce.FirstRun, nil)
				if elapsed < hold*2/3 {
					t.Errorf("the claim returned after %v: the table lock did not hold it", elapsed)
				}
				if n := calls.Load(); n != 1 {
					t.Errorf("fn ran %d times, want 1", n)
				}
				if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
					t.Fatalf("ledger rows: %d, want 1", n)
				}
				t.Logf("claimed after %v", elapsed.Round(time.Millisecond))
			})
		}

		// A table locked for longer than the claim waits out (2 s): a
		// retryable error, no ErrInProgress, fn not run. Through pgx's
		// statement cache the outcome may be a first run instead: pgx
		// drops the cached statements of a batch that failed, and the next
		// attempt's Parse, before the savepoint's lock_timeout, waits for
		// the table like any statement (the deadlock detector watches
		// that wait).
		t.Run("GivesUpRetryable", func(t *testing.T) {
			ctx, db, s, req := tableLockCase(t, f, "long")
			const hold = 4 * time.Second
			released := lockKeyTable(t, ctx, db, hold)
			var calls atomic.Int64
			start := time.Now()
			res, err := doNoWait(ctx, db, s, req, &calls)
			elapsed := time.Since(start)
			must(t, <-released)
			if err == nil {
				wantOutcome(t, "a claim behind a table locked for 4 s", res, err, sqlonce.FirstRun, nil)
				if n := ledgerRows(t, ctx, db, req.Key); n != 1 || calls.Load() != 1 {
					t.Errorf("fn ran %d times, ledger rows %d; want 1 and 1", calls.Load(), n)
				}
			} else {
				if errors.Is(err, sqlonce.ErrInProgress) || !sqlonce.IsRetryable(err) {
					t.Errorf("a claim behind a table locked for 4 s: %v (after %v); want a retryable error, no ErrInProgress", err, elapsed)
				}
				if n := calls.Load(); n != 0 {
					t.Errorf("fn ran %d times", n)
				}
				if elapsed >= hold {
					t.Errorf("gave up after %v, when the table's lock ended (%v)", elapsed, hold)
				}
			}
			t.Logf("after %v: %v, %v", elapsed.Round(time.Millisecond), res.Outcome, err)
		})

		// ctx ending while the table is locked: ctx's error.
		t.Run("CtxEnds", func(t *testing.T) {
			ctx, db, s, req := tableLockCase(t, f, "ctx")
			released := lockKeyTable(t, ctx, db, time.Second)
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			var calls atomic.Int64
			_, err := doNoWait(short, db, s, req, &calls)
			must(t, <-released)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sqlonce.ErrInProgress) {
				t.Errorf("ctx ended behind a locked table: %v; want context.DeadlineExceeded, no ErrInProgress", err)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("fn ran %d times", n)
			}
		})

		// A claim that gave up (ErrInProgress) leaves no savepoint of its
		// own open in the caller's transaction: ROLLBACK TO keeps a
		// savepoint, and pgxdriver left one (a subtransaction) per 409.
		t.Run("InProgressLeavesNoSavepoint", func(t *testing.T) {
			ctx, db, s, req := tableLockCase(t, f, "held")
			holder := holdKey(t, ctx, db, s, req)
			defer func() { _ = db.Rollback(context.Background(), holder) }()
			tx, err := db.Begin(ctx, harness.Default)
			must(t, err)
			defer func() { _ = db.Rollback(context.Background(), tx) }()
			_, err = s.Do(ctx, tx, req, func(ctx context.Context) error { return nil })
			if !errors.Is(err, sqlonce.ErrInProgress) {
				t.Fatalf("claim of a held key: %v, want ErrInProgress", err)
			}
			if err := db.TxExec(ctx, tx, "RELEASE SAVEPOINT sqlonce_claim"); err == nil {
				t.Error("the claim's savepoint sqlonce_claim is still open after ErrInProgress")
			}
		})
	})

	t.Run("LockWaitThenFirstRun", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteNoKeyWait)
		s, err := dedupe.New(db.Driver(), dedupe.WithLockWait(5*time.Second))
		must(t, err)
		req := dedupe.Request{Scope: "lockwait", Key: "k"}
		tx1 := holdKey(t, ctx, db, s, req)

		const hold = 300 * time.Millisecond
		waiting := make(chan struct{})
		type result struct {
			res     sqlonce.Result
			elapsed time.Duration
			err     error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				want, err := setLockWait(ctx, db.Dialect(), tx)
				if err != nil {
					return err
				}
				close(waiting)
				start := time.Now()
				r.res, err = s.Do(ctx, tx, req, func(ctx context.Context) error {
					return db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
				})
				r.elapsed = time.Since(start)
				if err != nil {
					return err
				}
				if got, err := lockWaitSetting(ctx, db.Dialect(), tx); err != nil || got != want {
					return fmt.Errorf("lock wait setting %q (%v), want %q", got, err, want)
				}
				return nil
			})
			done <- r
		}()
		<-waiting
		time.Sleep(hold) // the duplicate waits on tx1 meanwhile
		must(t, db.Rollback(ctx, tx1))
		r := <-done
		wantOutcome(t, "duplicate after the holder rolled back", r.res, r.err, sqlonce.FirstRun, nil)
		if r.elapsed < hold*2/3 {
			t.Errorf("the duplicate returned after %v: it did not wait for the holder", r.elapsed)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		t.Logf("waited %v", r.elapsed)
	})

	t.Run("LockWaitGivesUp", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteNoKeyWait)
		s, err := dedupe.New(db.Driver(), dedupe.WithLockWait(time.Second))
		must(t, err)
		req := dedupe.Request{Scope: "lockwait", Key: "k"}
		tx1 := holdKey(t, ctx, db, s, req)
		var elapsed time.Duration
		err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			start := time.Now()
			_, err := s.Do(ctx, tx, req, func(context.Context) error { return errors.New("ran") })
			elapsed = time.Since(start)
			return err
		})
		if !errors.Is(err, sqlonce.ErrInProgress) {
			t.Fatalf("duplicate held past the wait: %v, want ErrInProgress", err)
		}
		if elapsed < 900*time.Millisecond || elapsed > 10*time.Second {
			t.Errorf("gave up after %v, want about 1s", elapsed)
		}
		must(t, db.Commit(ctx, tx1))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		t.Logf("gave up after %v", elapsed)
	})

	t.Run("LeaseClaimNoWait", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteNoKeyWait)
		s, err := dedupe.New(db.Driver(), dedupe.WithNoWait())
		must(t, err)
		req := dedupe.Request{Scope: "nowait-lease", Key: "k"}
		tx1 := holdKey(t, ctx, db, s, req)
		start := time.Now()
		l, _, err := s.Claim(ctx, req, time.Minute)
		if !errors.Is(err, sqlonce.ErrInProgress) || l != nil {
			t.Fatalf("lease claim while held: %v, %v; want ErrInProgress", l, err)
		}
		// Waiting would take 50 s or forever.
		if elapsed := time.Since(start); elapsed > 10*time.Second {
			t.Errorf("no-wait lease claim took %v", elapsed)
		}
		must(t, db.Rollback(ctx, tx1))
		l, res, err := s.Claim(ctx, req, time.Minute)
		wantOutcome(t, "lease claim after the holder rolled back", res, err, sqlonce.FirstRun, nil)
		must(t, s.Complete(ctx, l, []byte("ok")))
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.State != 1 || string(row.Response) != "ok" {
			t.Fatalf("row after completion: %+v", row)
		}
	})

	t.Run("InvalidLockWait", func(t *testing.T) {
		db := f(t, 0)
		// 0 is WithNoWait (see ZeroValues).
		for _, d := range []time.Duration{-time.Nanosecond, -time.Second} {
			if _, err := dedupe.New(db.Driver(), dedupe.WithLockWait(d)); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Errorf("WithLockWait(%v): %v, want ErrInvalidArgument", d, err)
			}
		}
	})
}

// tableLockCase sets up a case of WaitsOutATableLock: a database, a Store
// that must not wait, and a request for key. PostgreSQL only.
func tableLockCase[TTx any](t *testing.T, f harness.Factory[TTx], key string) (context.Context, harness.DB[TTx], *dedupe.Store[TTx], dedupe.Request) {
	t.Helper()
	ctx := ctxT(t)
	db := f(t, 4)
	if db.Dialect() != "postgres" {
		t.Skip("PostgreSQL's lock_timeout bounds a table's lock as any other; MySQL's innodb_lock_wait_timeout bounds row locks only, and SQLite has no per-key wait")
	}
	s, err := dedupe.New(db.Driver(), dedupe.WithNoWait())
	must(t, err)
	return ctx, db, s, dedupe.Request{Scope: "nowait-table", Key: key}
}

// lockKeyTable locks sqlonce_keys against writes (SHARE) in a transaction
// of its own, for hold; the channel gets the error of its rollback.
func lockKeyTable[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], hold time.Duration) <-chan error {
	t.Helper()
	holder, err := db.Begin(ctx, harness.Default)
	must(t, err)
	t.Cleanup(func() { _ = db.Rollback(context.Background(), holder) })
	must(t, db.TxExec(ctx, holder, "LOCK TABLE sqlonce_keys IN SHARE MODE"))
	released := make(chan error, 1)
	go func() {
		time.Sleep(hold)
		released <- db.Rollback(context.Background(), holder)
	}()
	return released
}

// doNoWait claims req with s in a transaction of its own, fn writing a
// ledger row and counting its calls.
func doNoWait[TTx any](ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, calls *atomic.Int64) (res sqlonce.Result, err error) {
	err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		var err error
		res, err = s.Do(ctx, tx, req, func(ctx context.Context) error {
			calls.Add(1)
			return db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
		})
		return err
	})
	return res, err
}
