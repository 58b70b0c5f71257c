package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/unique"
)

const codeKey = "orders_code_key"

// fieldErrors is an error type of the kind applications write for
// validation, and a slice: interface values holding it cannot be compared
// with ==.
type fieldErrors []string

func (e fieldErrors) Error() string { return strings.Join(e, "; ") }

// insertOrder is the insert unique.Insert guards: an order whose code is
// the natural key, its customer the code too so that distinct codes never
// collide on orders_ref_key.
func insertOrder(b harness.Biz, code string) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) { return b.OrderInsert(ctx, code, code, 1) }
}

func orderByCode(b harness.Biz, code string, snapshot bool) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		get := b.OrderGetByCode
		if snapshot {
			get = b.OrderGetByCodeSnapshot
		}
		o, err := get(ctx, code)
		return o.ID, err
	}
}

func wantOrders[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], code string, want int64) {
	t.Helper()
	n, err := db.Pool().OrderCountByCode(ctx, code)
	must(t, err)
	if n != want {
		t.Fatalf("%d orders with code %s, want %d", n, code, want)
	}
}

func wantLedger[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], ref string, want int64) {
	t.Helper()
	n, err := db.Pool().LedgerCountByRef(ctx, ref)
	must(t, err)
	if n != want {
		t.Fatalf("%d ledger rows for %s, want %d", n, ref, want)
	}
}

func runUnique[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var res sqlonce.Result
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				var err error
				res, err = ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
					_, err := insertOrder(b, "u-1")(ctx)
					return err
				})
				if err != nil {
					return err
				}
				// The transaction goes on after a duplicate (PostgreSQL
				// would have aborted it without the savepoint) and commits.
				return b.LedgerInsert(ctx, fmt.Sprintf("after-%d", i), 1)
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
			wantLedger(t, ctx, db, fmt.Sprintf("after-%d", i), 1)
		}
		wantOrders(t, ctx, db, "u-1", 1)
	})

	t.Run("OtherConstraint", func(t *testing.T) {
		// Same customer and amount, another code: a duplicate on
		// orders_ref_key is not "already done", it is a different order.
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		_, err := db.Pool().OrderInsert(ctx, "u-first", "alice", 100)
		must(t, err)
		var insertErr, err2 error
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			b := db.Tx(tx)
			var res sqlonce.Result
			res, err2 = ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
				_, insertErr = b.OrderInsert(ctx, "u-second", "alice", 100)
				return insertErr
			})
			if res.Outcome != 0 {
				return fmt.Errorf("outcome %v with error %v", res.Outcome, err2)
			}
			// The error leaves the transaction usable.
			return b.LedgerInsert(ctx, "after-other", 1)
		}))
		if err2 == nil || err2 != insertErr {
			t.Fatalf("got %v, want the insert's own error %v", err2, insertErr)
		}
		if !strings.Contains(err2.Error(), constraintText(db, "orders_ref_key")) {
			t.Fatalf("%v does not name orders_ref_key", err2)
		}
		wantOrders(t, ctx, db, "u-second", 0)
		wantLedger(t, ctx, db, "after-other", 1)
	})

	t.Run("OtherErrorsPassThrough", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		errBoom := errors.New("boom")
		for _, tc := range []struct {
			name   string
			insert func(b harness.Biz) func(ctx context.Context) error
		}{
			{"caller's error", func(b harness.Biz) func(ctx context.Context) error {
				return func(ctx context.Context) error { return errBoom }
			}},
			{"after a write", func(b harness.Biz) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					if err := b.LedgerInsert(ctx, "boom", 1); err != nil {
						return err
					}
					return fmt.Errorf("wrapped: %w", errBoom)
				}
			}},
			{"no rows", func(b harness.Biz) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					_, err := b.OrderGetByID(ctx, -1)
					return err
				}
			}},
			// An error type that == cannot compare (a slice): Insert must
			// not panic on it.
			{"uncomparable error", func(b harness.Biz) func(ctx context.Context) error {
				return func(ctx context.Context) error {
					if err := b.LedgerInsert(ctx, "boom", 1); err != nil {
						return err
					}
					return fieldErrors{"code: too long", "amount: negative"}
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var insertErr, got error
				must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
					fn := tc.insert(db.Tx(tx))
					var res sqlonce.Result
					res, got = ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
						insertErr = fn(ctx)
						return insertErr
					})
					if res.Outcome != 0 {
						return fmt.Errorf("outcome %v", res.Outcome)
					}
					return nil
				}))
				if got == nil || !reflect.DeepEqual(got, insertErr) {
					t.Fatalf("got %v, want the insert's own error %v", got, insertErr)
				}
				wantLedger(t, ctx, db, "boom", 0)
			})
		}
		// Arguments that can never work.
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			if _, err := ins.Insert(ctx, tx, "", func(context.Context) error { return nil }); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				return fmt.Errorf("empty constraint: %v", err)
			}
			if _, err := ins.Insert(ctx, tx, codeKey, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
				return fmt.Errorf("nil insert: %v", err)
			}
			return nil
		}))
	})

	t.Run("RepeatCollidesOnSeveral", func(t *testing.T) {
		// An identical repeat collides on orders_code_key and on
		// orders_ref_key. The server reports one: the first it checks
		// (PostgreSQL in index creation order, MySQL the primary key and
		// then in definition order), here orders_code_key. Naming the
		// other leaves a genuine repeat an error.
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		_, err := db.Pool().OrderInsert(ctx, "u-both", "bob", 7)
		must(t, err)
		for _, tc := range []struct {
			constraint string
			want       sqlonce.Outcome
		}{
			{codeKey, sqlonce.AlreadyDone},
			{"orders_ref_key", 0},
		} {
			var res sqlonce.Result
			var got error
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				res, got = ins.Insert(ctx, tx, tc.constraint, func(ctx context.Context) error {
					_, err := b.OrderInsert(ctx, "u-both", "bob", 7)
					return err
				})
				return nil
			}))
			if res.Outcome != tc.want || (tc.want == 0) != (got != nil) {
				t.Fatalf("%s: got %v, %v; want %v", tc.constraint, res, got, tc.want)
			}
			if got != nil && !strings.Contains(got.Error(), constraintText(db, codeKey)) {
				t.Fatalf("%s: %v does not name %s", tc.constraint, got, codeKey)
			}
		}
		wantOrders(t, ctx, db, "u-both", 1)
	})

	t.Run("Deadlock", func(t *testing.T) {
		// Two transactions insert codes a and b in opposite orders: one
		// is the deadlock victim. Its Insert reports a retryable error,
		// never AlreadyDone, although MySQL has rolled its whole
		// transaction back (and the savepoint with it); the other's insert
		// then goes through.
		ctx := ctxT(t)
		db := f(t, 2)
		skipOnSQLite(t, db, sqliteNoRowLocks)
		ins := newInserter(t, db)
		var txs [2]TTx
		for i := range txs {
			tx, err := db.Begin(ctx, harness.Default)
			must(t, err)
			txs[i] = tx
			defer func() { _ = db.Rollback(ctx, tx) }()
		}
		codes := [2]string{"u-dl-a", "u-dl-b"}
		insert := func(i int, code string) (sqlonce.Result, error) {
			b := db.Tx(txs[i])
			return ins.Insert(ctx, txs[i], codeKey, func(ctx context.Context) error {
				_, err := insertOrder(b, code)(ctx)
				return err
			})
		}
		for i := range txs {
			res, err := insert(i, codes[i])
			must(t, err)
			if !res.FirstRun() {
				t.Fatalf("tx %d: %v", i, res)
			}
		}
		var results [2]sqlonce.Result
		errs := race(2, func(i int) error {
			var err error
			results[i], err = insert(i, codes[1-i])
			if sqlonce.IsRetryable(err) {
				// What the caller does with a retryable error. On
				// PostgreSQL the savepoint left the victim's transaction
				// open, holding its first row, which the other waits for.
				_ = db.Rollback(ctx, txs[i])
			}
			return err
		})
		victim := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if !results[i].FirstRun() {
					t.Fatalf("tx %d: %v", i, results[i])
				}
			case sqlonce.IsRetryable(err) && results[i].Outcome == 0:
				victim = i
			default:
				t.Fatalf("tx %d: %v, %v", i, results[i], err)
			}
		}
		if victim < 0 {
			t.Fatalf("no deadlock victim: %v", errs)
		}
		t.Logf("victim: %v", errs[victim])
		must(t, db.Commit(ctx, txs[1-victim]))
		for _, code := range codes {
			wantOrders(t, ctx, db, code, 1)
		}
	})

	t.Run("DuplicateThenDeadlock", func(t *testing.T) { unDuplicateThenDeadlock(t, f) })

	t.Run("NoPartialEffect", func(t *testing.T) {
		// insert writes a ledger row, then the duplicate order: the
		// savepoint undoes the ledger row too, on MySQL as on PostgreSQL.
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		_, err := insertOrder(db.Pool(), "u-partial")(ctx)
		must(t, err)
		var res sqlonce.Result
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			b := db.Tx(tx)
			var err error
			res, err = ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
				if err := b.LedgerInsert(ctx, "partial", 1); err != nil {
					return err
				}
				_, err := insertOrder(b, "u-partial")(ctx)
				return err
			})
			return err
		}))
		if !res.AlreadyDone() {
			t.Fatalf("got %v, want AlreadyDone", res)
		}
		wantLedger(t, ctx, db, "partial", 0)
		wantOrders(t, ctx, db, "u-partial", 1)
	})

	t.Run("InsertOrGet", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		ins := newInserter(t, db)
		var first int64
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var (
				id  int64
				res sqlonce.Result
			)
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				var err error
				id, res, err = unique.InsertOrGet(ctx, ins, tx, codeKey, insertOrder(b, "u-get"), orderByCode(b, "u-get", false))
				return err
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
			if i == 0 {
				first = id
			}
			if id != first || id == 0 {
				t.Fatalf("call %d: id %d, want %d", i, id, first)
			}
		}
		o, err := db.Pool().OrderGetByCode(ctx, "u-get")
		must(t, err)
		if o.ID != first {
			t.Fatalf("row id %d, InsertOrGet said %d", o.ID, first)
		}
	})

	t.Run("SnapshotTrap", func(t *testing.T) { runUniqueSnapshotTrap(t, f) })

	t.Run("Race", func(t *testing.T) {
		runLevels(t, f, Racers+4, func(t *testing.T, db harness.DB[TTx], iso harness.Isolation) {
			ctx := ctxT(t)
			ins := newInserter(t, db)
			const codes = 4
			var (
				c       counter
				retries atomic.Int64
				ids     [Racers]int64
			)
			errs := race(Racers, func(i int) error {
				code := fmt.Sprintf("u-race-%d", i%codes)
				var res sqlonce.Result
				n, err := retryTx(ctx, db, iso, func(tx TTx) error {
					b := db.Tx(tx)
					var err error
					ids[i], res, err = unique.InsertOrGet(ctx, ins, tx, codeKey, insertOrder(b, code), orderByCode(b, code, false))
					return err
				})
				retries.Add(int64(n))
				if err == nil {
					c.add(res)
				}
				return err
			})
			noErrors(t, errs)
			for k := range codes {
				code := fmt.Sprintf("u-race-%d", k)
				wantOrders(t, ctx, db, code, 1)
				o, err := db.Pool().OrderGetByCode(ctx, code)
				must(t, err)
				for i := k; i < Racers; i += codes {
					if ids[i] != o.ID {
						t.Errorf("racer %d got id %d for %s, the row's is %d", i, ids[i], code, o.ID)
					}
				}
			}
			if c.first.Load() != codes || c.done.Load() != Racers-codes {
				t.Fatalf("%s, want first=%d done=%d", &c, codes, Racers-codes)
			}
			t.Logf("%s: %s, %d retries", iso, &c, retries.Load())
		})
	})
}

// runUniqueSnapshotTrap: a transaction takes its snapshot, another inserts
// code X and commits, then the first runs InsertOrGet for X. The insert
// hits the duplicate; whether the read of the existing row sees it depends
// on the database, the level and the kind of read. Every outcome must be
// the existing row or an error sqlonce.IsRetryable accepts.
func runUniqueSnapshotTrap[TTx any](t *testing.T, f harness.Factory[TTx]) {
	type outcome string
	const (
		existing outcome = "existing row"
		// The duplicate is reported but the read cannot see the row:
		// ErrStaleRead.
		staleRead outcome = "ErrStaleRead"
		// The server refused instead: 40001, or MariaDB's 1020 for a
		// locking read of a row newer than the snapshot.
		refused outcome = "server refused"
		// PostgreSQL's SERIALIZABLE may report either.
		staleOrRefused outcome = "ErrStaleRead or server refused"
		// MySQL's SERIALIZABLE check is a locking read of the gap: the
		// other writer waits for this transaction and gives up (1205),
		// and this transaction's insert goes first.
		writerBlocked outcome = "writer blocked"
	)
	type want struct{ postgres, mysql outcome }
	for _, tc := range []struct {
		level    string
		iso      harness.Isolation
		snapshot bool
		// checkFirst: the transaction first looks for the code itself,
		// instead of reading another row.
		checkFirst bool
		want       want
	}{
		{"READ COMMITTED", harness.ReadCommitted, true, false, want{existing, existing}},
		{"READ COMMITTED", harness.ReadCommitted, false, false, want{existing, existing}},
		// PostgreSQL reports the duplicate (23505), but the row is not in
		// the snapshot, whichever the read. MySQL's locking read sees it.
		{"REPEATABLE READ", harness.RepeatableRead, true, false, want{staleRead, staleRead}},
		{"REPEATABLE READ", harness.RepeatableRead, false, false, want{staleRead, existing}},
		// MySQL's SERIALIZABLE reads are all locking reads.
		{"SERIALIZABLE", harness.Serializable, true, false, want{staleOrRefused, existing}},
		{"SERIALIZABLE", harness.Serializable, false, false, want{staleOrRefused, existing}},
		// Both transactions check the code is free, then insert it: with
		// both reads on record, PostgreSQL's SSI reports the duplicate as
		// a serialization failure (40001).
		{"SERIALIZABLE", harness.Serializable, false, true, want{refused, writerBlocked}},
		{StrictSnapshot, harness.RepeatableRead, true, false, want{staleRead, staleRead}},
		{StrictSnapshot, harness.RepeatableRead, false, false, want{staleRead, refused}},
	} {
		read := "locking read"
		if tc.snapshot {
			read = "snapshot read"
		}
		if tc.checkFirst {
			read += " after checking the code"
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
				// Every level but Default begins DEFERRED: the insert on a
				// stale snapshot fails with SQLITE_BUSY_SNAPSHOT.
				w = refused
			}
			ins := newInserter(t, db)
			seed, err := insertOrder(db.Pool(), "u-seed")(ctx)
			must(t, err)
			tx, err := db.Begin(ctx, tc.iso)
			must(t, err)
			defer func() { _ = db.Rollback(ctx, tx) }()
			b := db.Tx(tx)
			if tc.checkFirst {
				n, err := b.OrderCountByCode(ctx, "u-trap")
				must(t, err)
				if n != 0 {
					t.Fatalf("%d orders u-trap", n)
				}
			} else {
				// Take the snapshot with a read of another row: a point
				// read of an existing key, so that MySQL's SERIALIZABLE,
				// which turns it into a locking read, locks that row only.
				_, err = b.OrderGetVersionSnapshot(ctx, seed)
				must(t, err)
			}
			var theirs int64
			var theirErr error
			if tc.checkFirst {
				// The other writer checks too, at the same level.
				theirErr = harness.WithTx(ctx, writer, tc.iso, func(tx TTx) error {
					wb := writer.Tx(tx)
					if _, err := wb.OrderCountByCode(ctx, "u-trap"); err != nil {
						return err
					}
					var err error
					theirs, err = insertOrder(wb, "u-trap")(ctx)
					return err
				})
			} else {
				theirs, theirErr = insertOrder(writer.Pool(), "u-trap")(ctx)
			}
			blocked := theirErr != nil
			if blocked && !sqlonce.IsRetryable(theirErr) {
				t.Fatalf("other writer: %v", theirErr)
			}

			id, res, err := unique.InsertOrGet(ctx, ins, tx, codeKey, insertOrder(b, "u-trap"), orderByCode(b, "u-trap", tc.snapshot))
			var got outcome
			switch {
			case err == nil && res.FirstRun() && blocked:
				got = writerBlocked
			case err == nil && res.AlreadyDone() && id == theirs:
				got = existing
			case errors.Is(err, sqlonce.ErrStaleRead) && sqlonce.IsRetryable(err):
				got = staleRead
			case err != nil && sqlonce.IsRetryable(err):
				got = refused
			default:
				t.Fatalf("got %d, %v, %v; the other transaction inserted %d", id, res, err, theirs)
			}
			if got != w && (w != staleOrRefused || got == existing) {
				t.Fatalf("got %s (%v), want %s", got, err, w)
			}
			t.Logf("%s: %v", got, errors.Join(err, theirErr))
			if got == writerBlocked {
				must(t, db.Commit(ctx, tx))
				theirs = id
			} else {
				_ = db.Rollback(ctx, tx)
			}

			// The retry, with a fresh snapshot, gets the existing row.
			// (After a blocked writer, this stands for the writer's retry.)
			must(t, harness.WithTx(ctx, db, tc.iso, func(tx TTx) error {
				b := db.Tx(tx)
				var err error
				id, res, err = unique.InsertOrGet(ctx, ins, tx, codeKey, insertOrder(b, "u-trap"), orderByCode(b, "u-trap", tc.snapshot))
				return err
			}))
			if !res.AlreadyDone() || id != theirs {
				t.Fatalf("retry: %v id %d, want AlreadyDone id %d", res, id, theirs)
			}
			wantOrders(t, ctx, db, "u-trap", 1)
		})
	}
}

// unDuplicateThenDeadlock: insert meets the duplicate, then its
// transaction is chosen as a deadlock victim before Insert rolls back to
// its savepoint. The server has rolled the whole transaction back (and
// the savepoint with it), so the error holds a duplicate first and a
// deadlock after it (measured through a multi-primary MariaDB cluster:
// "Error 1062 Duplicate entry" joined to "rollback to savepoint: Error
// 1213 Deadlock"). Insert must not answer AlreadyDone, and IsRetryable
// must say true whatever error comes first; the caller's retry then
// answers AlreadyDone, with one order in the database.
func unDuplicateThenDeadlock[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 4)
	skipOnSQLite(t, db, sqliteNoRowLocks)
	if db.Dialect() == "postgres" {
		t.Skip("PostgreSQL aborts the transaction at the duplicate: insert cannot go on to deadlock before the rollback to the savepoint")
	}
	ins := newInserter(t, db)
	const code = "u-dup-dl"
	_, err := insertOrder(db.Pool(), code)(ctx)
	must(t, err)
	id1, err := db.Pool().OrderInsert(ctx, "u-dl-1", "u-dl-1", 1)
	must(t, err)
	id2, err := db.Pool().OrderInsert(ctx, "u-dl-2", "u-dl-2", 1)
	must(t, err)

	// other locks order 2, the victim order 1, then each wants the other's.
	// other writes many rows first: MySQL rolls back the lighter
	// transaction.
	other, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, other) }()
	for i := range 50 {
		must(t, db.Tx(other).LedgerInsert(ctx, fmt.Sprintf("u-weight-%d", i), 1))
	}
	_, err = db.Tx(other).OrderAddAmount(ctx, id2, 1, 1)
	must(t, err)

	victim, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, victim) }()
	_, err = db.Tx(victim).OrderAddAmount(ctx, id1, 1, 1)
	must(t, err)

	type outcome struct {
		res sqlonce.Result
		err error
	}
	waiting := make(chan struct{})
	victimDone := make(chan outcome, 1)
	go func() {
		b := db.Tx(victim)
		res, err := ins.Insert(ctx, victim, codeKey, func(ctx context.Context) error {
			_, dupErr := insertOrder(b, code)(ctx)
			if dupErr == nil {
				return errors.New("no duplicate")
			}
			close(waiting)
			_, dlErr := b.OrderAddAmount(ctx, id2, 1, 1) // waits for other
			if dlErr == nil {
				return errors.New("no deadlock")
			}
			return errors.Join(dupErr, dlErr)
		})
		victimDone <- outcome{res, err}
	}()
	select {
	case <-waiting:
	case o := <-victimDone:
		t.Fatalf("victim: %v, %v", o.res, o.err)
	}
	time.Sleep(100 * time.Millisecond) // the victim waits first
	otherDone := make(chan error, 1)
	go func() {
		_, err := db.Tx(other).OrderAddAmount(ctx, id1, 1, 1)
		otherDone <- err
	}()

	var o outcome
	select {
	case o = <-victimDone:
	case <-time.After(30 * time.Second):
		t.Fatal("no deadlock victim after 30s")
	}
	t.Logf("victim: %v", o.err)
	if o.err == nil || o.res.Outcome != 0 {
		t.Fatalf("victim: got %v, %v; want an error, never AlreadyDone, for a transaction the server rolled back", o.res, o.err)
	}
	if c := driver.Classify(o.err); !c.Has(driver.Unique) || !c.Has(driver.TxRolledBack) {
		t.Fatalf("victim: %v is not the duplicate joined to the deadlock (class %b)", o.err, c)
	}
	if !sqlonce.IsRetryable(o.err) {
		t.Fatalf("IsRetryable(%v) = false, want true: the server rolled the transaction back", o.err)
	}
	must(t, db.Rollback(ctx, victim))
	must(t, <-otherDone)
	must(t, db.Rollback(ctx, other))

	// The caller retries, as IsRetryable tells it to: the order exists.
	var res sqlonce.Result
	must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		b := db.Tx(tx)
		var err error
		res, err = ins.Insert(ctx, tx, codeKey, func(ctx context.Context) error {
			_, err := insertOrder(b, code)(ctx)
			return err
		})
		return err
	}))
	if !res.AlreadyDone() {
		t.Fatalf("retry: got %v, want AlreadyDone", res)
	}
	wantOrders(t, ctx, db, code, 1)
}

// newInserter returns an Inserter on db's driver, failing t on an error.
func newInserter[TTx any](t testing.TB, db harness.DB[TTx]) *unique.Inserter[TTx] {
	t.Helper()
	ins, err := unique.New(db.Driver())
	must(t, err)
	return ins
}
