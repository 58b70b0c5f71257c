package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/unique"
)

// runUniqueOtherConstraint: same customer and amount, another code. A
// duplicate on orders_ref_key is not "already done", it is a different
// order: the form returns the INSERT's own error, and the transaction
// keeps its earlier write and goes on where the form allows it.
func runUniqueOtherConstraint[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	form.noConflictTarget(t, db)
	ins := newInserter(t, db)
	_, err := db.Pool().OrderInsert(ctx, "u-first", "alice", 100)
	must(t, err)
	var stmtErr, got error
	var after error
	err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		b := db.Tx(tx)
		if err := b.LedgerInsert(ctx, "before-other", 1); err != nil {
			return err
		}
		var res sqlonce.Result
		res, got = form.order(ctx, ins, tx, b, codeKey, order{"u-second", "alice", 100}, &stmtErr)
		if res.Outcome != 0 {
			return fmt.Errorf("outcome %v with error %v", res.Outcome, got)
		}
		after = b.LedgerInsert(ctx, "after-other", 1)
		return after
	})
	if got == nil || got != stmtErr {
		t.Fatalf("got %v, want the INSERT's own error %v", got, stmtErr)
	}
	if !driver.Classify(got).Has(driver.Unique) || !strings.Contains(got.Error(), constraintText(db, "orders_ref_key")) {
		t.Fatalf("%v is not a duplicate on orders_ref_key", got)
	}
	wantOrders(t, ctx, db, "u-second", 0)
	if form.usableAfterError(db) {
		must(t, err)
		wantLedger(t, ctx, db, "before-other", 1)
		wantLedger(t, ctx, db, "after-other", 1)
		return
	}
	// A failed statement aborted the PostgreSQL transaction: the
	// caller rolls it back, as after any error.
	if after == nil || !errors.Is(err, after) {
		t.Fatalf("the transaction went on after the failed statement: %v", err)
	}
	t.Logf("after the failed statement: %v", after)
	wantLedger(t, ctx, db, "before-other", 0)
}

// runUniqueOtherErrors: errors that are not a duplicate are returned as
// they are, never AlreadyDone, and leave the transaction usable with its
// earlier writes where the form allows it: a NOT NULL column given NULL, a
// foreign key to no row, and, for the forms that run a function of the
// caller's, that function's own errors.
func runUniqueOtherErrors[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	form.noConflictTarget(t, db)
	ins := newInserter(t, db)
	orderID, err := insertOrder(db.Pool(), "u-shipped")(ctx)
	must(t, err)
	dhl := "dhl"
	for _, tc := range []struct {
		name    string
		code    string
		orderID int64
		carrier *string
		says    string // in the error's text, whatever the database
	}{
		{"NotNull", "s-null", orderID, nil, "null"},
		{"ForeignKey", "s-fk", -1, &dhl, "foreign key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := "before-" + tc.name
			var got, after error
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				if err := b.LedgerInsert(ctx, ref, 1); err != nil {
					return err
				}
				var res sqlonce.Result
				res, got = form.shipment(ctx, ins, tx, b, tc.code, tc.orderID, tc.carrier)
				if res.Outcome != 0 {
					return fmt.Errorf("outcome %v with error %v", res.Outcome, got)
				}
				after = b.LedgerInsert(ctx, ref+"-after", 1)
				return after
			})
			if got == nil || driver.Classify(got).Has(driver.Unique) || sqlonce.IsRetryable(got) ||
				!strings.Contains(strings.ToLower(got.Error()), tc.says) {
				t.Fatalf("got %v, want the INSERT's %s error", got, tc.says)
			}
			t.Logf("%v", got)
			n, cErr := db.Pool().ShipmentCountByCode(ctx, tc.code)
			must(t, cErr)
			if n != 0 {
				t.Fatalf("%d shipments %s", n, tc.code)
			}
			if form.usableAfterError(db) {
				must(t, err)
				wantLedger(t, ctx, db, ref, 1)
				wantLedger(t, ctx, db, ref+"-after", 1)
			} else if after == nil {
				t.Fatal("the PostgreSQL transaction went on after the failed statement")
			}
		})
	}
	if form.run == nil {
		return
	}

	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name string
		// several: insert runs more than one statement (Insert only).
		several bool
		insert  func(b harness.Biz) func(ctx context.Context) error
	}{
		{"CallersError", false, func(b harness.Biz) func(ctx context.Context) error {
			return func(ctx context.Context) error { return errBoom }
		}},
		{"AfterAWrite", true, func(b harness.Biz) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				if err := b.LedgerInsert(ctx, "boom", 1); err != nil {
					return err
				}
				return fmt.Errorf("wrapped: %w", errBoom)
			}
		}},
		{"NoRows", false, func(b harness.Biz) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				_, err := b.OrderGetByID(ctx, -1)
				return err
			}
		}},
		// An error type that == cannot compare (a slice): the form must
		// not panic on it.
		{"UncomparableError", true, func(b harness.Biz) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				if err := b.LedgerInsert(ctx, "boom", 1); err != nil {
					return err
				}
				return fieldErrors{"code: too long", "amount: negative"}
			}
		}},
		{"UncomparableErrorAlone", false, func(b harness.Biz) func(ctx context.Context) error {
			return func(ctx context.Context) error { return fieldErrors{"code: too long", "amount: negative"} }
		}},
	} {
		if tc.several && form.name != "Insert" {
			continue // InsertOne's insert is one statement, failing only with it
		}
		t.Run(tc.name, func(t *testing.T) {
			var insertErr, got error
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				b := db.Tx(tx)
				if err := b.LedgerInsert(ctx, "before-"+tc.name, 1); err != nil {
					return err
				}
				fn := tc.insert(b)
				var res sqlonce.Result
				res, got = form.run(ctx, ins, tx, codeKey, func(ctx context.Context) error {
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
			wantLedger(t, ctx, db, "before-"+tc.name, 1)
		})
	}
}

// runUniqueNotConstraintSpecific shows why Inserted needs a conflict
// target, and why MySQL/MariaDB have no statement for it. An untargeted
// ON CONFLICT DO NOTHING (PostgreSQL, SQLite), INSERT IGNORE and ON
// DUPLICATE KEY UPDATE id = id (MySQL/MariaDB) insert nothing on a
// duplicate of any unique key: a different order colliding on
// orders_ref_key affects 0 rows, which Inserted would take for a repeat.
// INSERT IGNORE also turns a NOT NULL or foreign-key error into a
// warning, inserting a defaulted row or none; ON CONFLICT DO NOTHING and
// ON DUPLICATE KEY UPDATE still fail on those.
func runUniqueNotConstraintSpecific[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)
	orderID, err := db.Pool().OrderInsert(ctx, "u-first", "alice", 100)
	must(t, err)
	mysql := db.Dialect() == "mysql"

	type stmt struct {
		name string
		run  func(b harness.Biz) (int64, error)
	}
	anyKey := []stmt{{"untargeted", func(b harness.Biz) (int64, error) { return b.OrderInsertIgnore(ctx, "u-second", "alice", 100) }}}
	if mysql {
		anyKey = append(anyKey, stmt{"ON DUPLICATE KEY UPDATE", func(b harness.Biz) (int64, error) {
			return b.OrderInsertIfAbsent(ctx, "u-second", "alice", 100)
		}})
	}
	for _, s := range anyKey {
		var rows int64
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			rows, err = s.run(db.Tx(tx))
			return err
		}))
		res, err := unique.Inserted(ctx, rows)
		must(t, err)
		if !res.AlreadyDone() {
			t.Fatalf("%s: %d rows, %v; want the trap: 0 rows, taken for a repeat", s.name, rows, res)
		}
		t.Logf("%s: a different order colliding on orders_ref_key affected %d rows: Inserted says %v", s.name, rows, res)
	}
	wantOrders(t, ctx, db, "u-second", 0)

	dhl := "dhl"
	for _, tc := range []struct {
		name    string
		code    string
		orderID int64
		carrier *string
	}{
		{"NOT NULL", "s-null", orderID, nil},
		{"foreign key", "s-fk", -1, &dhl},
	} {
		var rows int64
		err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			var err error
			rows, err = db.Tx(tx).ShipmentInsertIgnore(ctx, tc.code, tc.orderID, tc.carrier)
			return err
		})
		n, cErr := db.Pool().ShipmentCountByCode(ctx, tc.code)
		must(t, cErr)
		switch {
		case mysql && err == nil:
			t.Logf("INSERT IGNORE, %s error: no error, %d rows, %d shipments stored", tc.name, rows, n)
		case !mysql && err != nil && n == 0:
			t.Logf("untargeted ON CONFLICT DO NOTHING, %s error: %v", tc.name, err)
		default:
			t.Fatalf("%s: %d rows, %d shipments, %v", tc.name, rows, n, err)
		}
	}
}
