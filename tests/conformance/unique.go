package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

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

// order is a row of orders to insert.
type order struct {
	code, customer string
	amount         int64
}

// orderOf is the order insertOrder inserts for code.
func orderOf(code string) order { return order{code, code, 1} }

// uniqueForm is one of unique's ways to judge an insert with a key of its
// own. Every case runs on each form that can express it.
type uniqueForm[TTx any] struct {
	name string
	// run guards the caller's insert function (Insert, InsertOne); nil
	// for a form whose caller runs the statement itself.
	run func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, constraint string, insert func(context.Context) error) (sqlonce.Result, error)
	// order inserts o in tx through the form, judged on constraint
	// (Inserted: on code, its statement's conflict target), and sets
	// *stmtErr to the error of the INSERT statement itself.
	order func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, constraint string, o order, stmtErr *error) (sqlonce.Result, error)
	// orderOrGet inserts o and returns the order's id either way, read by
	// its code; snapshot reads the existing row with a plain read.
	orderOrGet func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, o order, snapshot bool) (int64, sqlonce.Result, error)
	// shipment inserts a shipment through the form, judged on
	// shipments_code_key.
	shipment func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, code string, orderID int64, carrier *string) (sqlonce.Result, error)
	// rows: the form judges the rows the caller's statement affected. The
	// statement's errors are the caller's, and abort a PostgreSQL
	// transaction, as any failed statement does.
	rows bool
}

// usableAfterError reports whether tx goes on after the form returned an
// error of the insert's: always under a savepoint or where a failed
// statement rolls back alone, not after the statement of a rows form on
// PostgreSQL.
func (f uniqueForm[TTx]) usableAfterError(db harness.DB[TTx]) bool {
	return !f.rows || db.Dialect() != "postgres"
}

// noConflictTarget skips a case of a rows form on MySQL/MariaDB.
func (f uniqueForm[TTx]) noConflictTarget(t *testing.T, db harness.DB[TTx]) {
	t.Helper()
	if f.rows && db.Dialect() == "mysql" {
		t.Skip("MySQL/MariaDB have no conflict target: INSERT IGNORE and ON DUPLICATE KEY UPDATE give up on a duplicate of any unique key (see Unique/Inserted/NotConstraintSpecific); InsertOne is the form for them")
	}
}

func uniqueForms[TTx any]() []uniqueForm[TTx] {
	guarded := func(name string, single bool) uniqueForm[TTx] {
		run := func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, constraint string, insert func(context.Context) error) (sqlonce.Result, error) {
			if single {
				return ins.InsertOne(ctx, tx, constraint, insert)
			}
			return ins.Insert(ctx, tx, constraint, insert)
		}
		orGet := unique.InsertOrGet[int64, TTx]
		if single {
			orGet = unique.InsertOneOrGet[int64, TTx]
		}
		return uniqueForm[TTx]{
			name: name,
			run:  run,
			order: func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, constraint string, o order, stmtErr *error) (sqlonce.Result, error) {
				return run(ctx, ins, tx, constraint, func(ctx context.Context) error {
					_, *stmtErr = b.OrderInsert(ctx, o.code, o.customer, o.amount)
					return *stmtErr
				})
			},
			orderOrGet: func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, o order, snapshot bool) (int64, sqlonce.Result, error) {
				return orGet(ctx, ins, tx, codeKey,
					func(ctx context.Context) (int64, error) { return b.OrderInsert(ctx, o.code, o.customer, o.amount) },
					orderByCode(b, o.code, snapshot))
			},
			shipment: func(ctx context.Context, ins *unique.Inserter[TTx], tx TTx, b harness.Biz, code string, orderID int64, carrier *string) (sqlonce.Result, error) {
				return run(ctx, ins, tx, "shipments_code_key", func(ctx context.Context) error {
					return b.ShipmentInsert(ctx, code, orderID, carrier)
				})
			},
		}
	}
	inserted := uniqueForm[TTx]{
		name: "Inserted",
		rows: true,
		order: func(ctx context.Context, _ *unique.Inserter[TTx], _ TTx, b harness.Biz, _ string, o order, stmtErr *error) (sqlonce.Result, error) {
			var rows int64
			rows, *stmtErr = b.OrderInsertIfAbsent(ctx, o.code, o.customer, o.amount)
			if *stmtErr != nil {
				return sqlonce.Result{}, *stmtErr
			}
			return unique.Inserted(ctx, rows)
		},
		// What a caller of Inserted does for the row: read it by its key,
		// when AlreadyDone as InsertOrGet does, and here on a first run too
		// (the statement returns no id).
		orderOrGet: func(ctx context.Context, _ *unique.Inserter[TTx], _ TTx, b harness.Biz, o order, snapshot bool) (int64, sqlonce.Result, error) {
			rows, err := b.OrderInsertIfAbsent(ctx, o.code, o.customer, o.amount)
			if err != nil {
				return 0, sqlonce.Result{}, err
			}
			res, err := unique.Inserted(ctx, rows)
			if err != nil {
				return 0, res, err
			}
			id, err := orderByCode(b, o.code, snapshot)(ctx)
			if err != nil {
				return 0, sqlonce.Result{}, err
			}
			return id, res, nil
		},
		shipment: func(ctx context.Context, _ *unique.Inserter[TTx], _ TTx, b harness.Biz, code string, orderID int64, carrier *string) (sqlonce.Result, error) {
			rows, err := b.ShipmentInsertIfAbsent(ctx, code, orderID, carrier)
			if err != nil {
				return sqlonce.Result{}, err
			}
			return unique.Inserted(ctx, rows)
		},
	}
	return []uniqueForm[TTx]{guarded("Insert", false), guarded("InsertOne", true), inserted}
}

func runUnique[TTx any](t *testing.T, f harness.Factory[TTx]) {
	for _, form := range uniqueForms[TTx]() {
		part(t, form.name, func(t *testing.T) { runUniqueForm(t, f, form) })
	}
}

func runUniqueForm[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		// The transaction writes before and after the insert; both
		// commit with it, after a duplicate too (PostgreSQL would have
		// aborted the transaction at a failed INSERT without a savepoint).
		ctx := ctxT(t)
		db := f(t, 0)
		form.noConflictTarget(t, db)
		ins := newInserter(t, db)
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var res sqlonce.Result
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				if err := b.LedgerInsert(ctx, fmt.Sprintf("before-%d", i), 1); err != nil {
					return err
				}
				var err, stmtErr error
				res, err = form.order(ctx, ins, tx, b, codeKey, orderOf("u-1"), &stmtErr)
				if err != nil {
					return err
				}
				return b.LedgerInsert(ctx, fmt.Sprintf("after-%d", i), 1)
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
			wantLedger(t, ctx, db, fmt.Sprintf("before-%d", i), 1)
			wantLedger(t, ctx, db, fmt.Sprintf("after-%d", i), 1)
		}
		wantOrders(t, ctx, db, "u-1", 1)
	})

	t.Run("OtherConstraint", func(t *testing.T) { runUniqueOtherConstraint(t, f, form) })
	t.Run("OtherErrors", func(t *testing.T) { runUniqueOtherErrors(t, f, form) })
	if form.rows {
		t.Run("NotConstraintSpecific", func(t *testing.T) { runUniqueNotConstraintSpecific(t, f) })
	}

	t.Run("RepeatCollidesOnSeveral", func(t *testing.T) {
		// An identical repeat collides on orders_code_key and on
		// orders_ref_key. The server reports one: the first it checks
		// (PostgreSQL in index creation order, MySQL the primary key and
		// then in definition order), here orders_code_key. Naming the
		// other leaves a genuine repeat an error. A conflict target
		// decides by itself: ON CONFLICT (code) is checked first.
		ctx := ctxT(t)
		db := f(t, 0)
		form.noConflictTarget(t, db)
		ins := newInserter(t, db)
		_, err := db.Pool().OrderInsert(ctx, "u-both", "bob", 7)
		must(t, err)
		cases := []struct {
			constraint string
			want       sqlonce.Outcome
		}{{codeKey, sqlonce.AlreadyDone}}
		if !form.rows {
			cases = append(cases, struct {
				constraint string
				want       sqlonce.Outcome
			}{"orders_ref_key", 0})
		}
		for _, tc := range cases {
			var res sqlonce.Result
			var got error
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var stmtErr error
				res, got = form.order(ctx, ins, tx, db.Tx(tx), tc.constraint, order{"u-both", "bob", 7}, &stmtErr)
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

	t.Run("Deadlock", func(t *testing.T) { runUniqueDeadlock(t, f, form) })
	if form.run != nil {
		t.Run("DuplicateThenDeadlock", func(t *testing.T) { unDuplicateThenDeadlock(t, f, form) })
	}

	if form.name == "Insert" {
		t.Run("NoPartialEffect", func(t *testing.T) {
			// insert writes a ledger row, then the duplicate order: the
			// savepoint undoes the ledger row too, on MySQL as on
			// PostgreSQL.
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
	}

	t.Run("OrGet", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		form.noConflictTarget(t, db)
		ins := newInserter(t, db)
		var first int64
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var (
				id  int64
				res sqlonce.Result
			)
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				id, res, err = form.orderOrGet(ctx, ins, tx, db.Tx(tx), orderOf("u-get"), false)
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
			t.Fatalf("row id %d, the form said %d", o.ID, first)
		}
	})

	t.Run("ManyInOneTransaction", func(t *testing.T) {
		// One transaction inserts many orders, each through the form,
		// then repeats every one: savepoints left for COMMIT to release
		// must neither nest without bound nor get in the way of the
		// repeats' rollbacks. Everything the transaction wrote commits.
		ctx := ctxT(t)
		db := f(t, 0)
		form.noConflictTarget(t, db)
		ins := newInserter(t, db)
		const n = 100
		var c counter
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			b := db.Tx(tx)
			for round := range 2 {
				for i := range n {
					var stmtErr error
					res, err := form.order(ctx, ins, tx, b, codeKey, orderOf(fmt.Sprintf("u-many-%d", i)), &stmtErr)
					if err != nil {
						return fmt.Errorf("round %d, order %d: %w", round, i, err)
					}
					c.add(res)
				}
				if err := b.LedgerInsert(ctx, fmt.Sprintf("many-%d", round), 1); err != nil {
					return err
				}
			}
			return nil
		}))
		if c.first.Load() != n || c.done.Load() != n {
			t.Fatalf("%s, want first=%d done=%d", &c, n, n)
		}
		for i := range n {
			wantOrders(t, ctx, db, fmt.Sprintf("u-many-%d", i), 1)
		}
		wantLedger(t, ctx, db, "many-0", 1)
		wantLedger(t, ctx, db, "many-1", 1)
	})

	t.Run("SnapshotTrap", func(t *testing.T) { runUniqueSnapshotTrap(t, f, form) })

	t.Run("Race", func(t *testing.T) {
		runLevels(t, f, Racers+4, func(t *testing.T, db harness.DB[TTx], iso harness.Isolation) {
			form.noConflictTarget(t, db)
			ctx := ctxT(t)
			ins := newInserter(t, db)
			const codes = 4
			var (
				c       counter
				retries atomic.Int64
				ids     = make([]int64, Racers)
			)
			errs := race(Racers, func(i int) error {
				// A repeat collides on orders_code_key and, with the
				// same customer, on orders_ref_key too, which the guarded
				// forms' plain INSERT checks after the code. Inserted's
				// racers each have a customer of their own: see
				// RaceOnSeveralConstraints.
				o := orderOf(fmt.Sprintf("u-race-%d", i%codes))
				if form.rows {
					o.customer = fmt.Sprintf("racer-%d", i)
				}
				var res sqlonce.Result
				n, err := retryTx(ctx, db, iso, func(tx TTx) error {
					var err error
					ids[i], res, err = form.orderOrGet(ctx, ins, tx, db.Tx(tx), o, false)
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
			n, err := db.Pool().OrderCount(ctx)
			must(t, err)
			if n != codes {
				t.Fatalf("%d orders, want %d", n, codes)
			}
			if c.first.Load() != codes || c.done.Load() != int64(Racers)-codes {
				t.Fatalf("%s, want first=%d done=%d", &c, codes, Racers-codes)
			}
			t.Logf("%s: %s, %d retries", iso, &c, retries.Load())
		})
	})

	if form.rows {
		t.Run("RaceOnSeveralConstraints", func(t *testing.T) { runInsertedRaceOnSeveral(t, f, form) })
	}

	if form.run != nil {
		t.Run("InvalidArguments", func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			ins := newInserter(t, db)
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				if _, err := form.run(ctx, ins, tx, "", func(context.Context) error { return nil }); !errors.Is(err, sqlonce.ErrInvalidArgument) {
					return fmt.Errorf("empty constraint: %v", err)
				}
				if _, err := form.run(ctx, ins, tx, codeKey, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
					return fmt.Errorf("nil insert: %v", err)
				}
				return nil
			}))
		})
	}
}

// newInserter returns an Inserter on db's driver, failing t on an error.
func newInserter[TTx any](t testing.TB, db harness.DB[TTx]) *unique.Inserter[TTx] {
	t.Helper()
	ins, err := unique.New(db.Driver())
	must(t, err)
	return ins
}

// runInsertedRaceOnSeveral measures the limit of a conflict target under
// concurrency: racers insert identical orders, which collide on
// orders_code_key (the target) and on orders_ref_key. PostgreSQL checks a
// target for conflicts before it inserts, waiting for a transaction that
// holds a conflicting row; two racers that both pass that check before
// either inserts then meet in orders_ref_key, which ON CONFLICT (code)
// does not cover, and the second fails with a duplicate on it once the
// first commits. Every error must be that one, never a lost or doubled
// order; how many there are depends on timing and is logged. (Insert and
// InsertOne race on both constraints in their Race case without such
// errors: their INSERT checks orders_code_key first.)
func runInsertedRaceOnSeveral[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	ctx := ctxT(t)
	db := f(t, Racers+4)
	form.noConflictTarget(t, db)
	warm(t, db, Racers+4)
	const rounds, codes = 5, 4
	var c counter
	refErrs := 0
	for round := range rounds {
		errs := race(Racers, func(i int) error {
			o := orderOf(fmt.Sprintf("u-several-%d-%d", round, i%codes))
			_, err := retryTx(ctx, db, harness.Default, func(tx TTx) error {
				var stmtErr error
				res, err := form.order(ctx, nil, tx, db.Tx(tx), codeKey, o, &stmtErr)
				if err == nil {
					c.add(res)
				}
				return err
			})
			return err
		})
		for i, err := range errs {
			switch {
			case err == nil:
			case driver.Classify(err).Has(driver.Unique) && strings.Contains(err.Error(), constraintText(db, "orders_ref_key")):
				refErrs++
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}
		for k := range codes {
			wantOrders(t, ctx, db, fmt.Sprintf("u-several-%d-%d", round, k), 1)
		}
	}
	if c.first.Load() != rounds*codes || c.done.Load()+int64(refErrs) != rounds*(int64(Racers)-codes) {
		t.Fatalf("%s and %d duplicates on orders_ref_key, want first=%d and %d others", &c, refErrs, rounds*codes, rounds*(Racers-codes))
	}
	t.Logf("%d racers on %d codes, %d rounds: %s, %d duplicates on orders_ref_key", Racers, codes, rounds, &c, refErrs)
}
