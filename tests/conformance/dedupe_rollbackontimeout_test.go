package conformance

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestMariaDBRollbackOnTimeoutInFn: with innodb_rollback_on_timeout=ON a
// lock wait timeout in fn's own statement rolls back the whole transaction,
// as a deadlock does (FnError/DeadlockInFn in the shared suite). A duplicate
// waiting for the key then takes it; Do must not undo the claim on the
// victim's connection, where MySQL would run the DELETE in autocommit and
// remove the duplicate's committed key.
func TestMariaDBRollbackOnTimeoutInFn(t *testing.T) {
	dsn := throwawayMariaDB(t, "--innodb-rollback-on-timeout=ON")
	ctx := ctxT(t)
	db, err := sql.Open("mysql", dsn)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	must(t, migrations.Up(ctx, db, migrations.MySQL))
	must(t, bizdb.Migrate(ctx, db, "mysql"))
	store, err := dedupe.New(testdrv.MySQL(t, db))
	must(t, err)
	req := dedupe.Request{Scope: "rot", Key: "k"}
	_, err = db.ExecContext(ctx, "INSERT INTO orders (code) VALUES ('R-1')")
	must(t, err)
	ledger := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ('k', 1)")
		return err
	}
	withTx := func(fn func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}

	holder, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer holder.Rollback()
	_, err = holder.ExecContext(ctx, "UPDATE orders SET amount = 1 WHERE code = 'R-1'")
	must(t, err)

	victim, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer victim.Rollback()
	_, err = victim.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")
	must(t, err)
	claimed := make(chan struct{})
	dupClaimed := make(chan struct{})
	victimDone := make(chan error, 1)
	go func() {
		_, err := store.Do(ctx, victim, req, func(ctx context.Context) error {
			close(claimed)
			_, err := victim.ExecContext(ctx, "UPDATE orders SET amount = 2 WHERE code = 'R-1'")
			if err == nil {
				return errors.New("no lock wait timeout")
			}
			select { // the server has released the key: let the duplicate take it
			case <-dupClaimed:
			case <-time.After(5 * time.Second):
			}
			return err
		})
		victimDone <- err
	}()
	select {
	case <-claimed:
	case err := <-victimDone:
		t.Fatalf("victim: %v", err)
	}
	dupDone := make(chan error, 1)
	go func() {
		dupDone <- withTx(func(tx *sql.Tx) error {
			res, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
				close(dupClaimed)
				return ledger(tx)
			})
			if err == nil && !res.FirstRun() {
				err = errors.New("duplicate: not a first run after the victim's rollback")
			}
			return err
		})
	}()

	err = <-victimDone
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("victim: got %v, want a lock wait timeout", err)
	}
	must(t, victim.Rollback())
	must(t, <-dupDone)
	must(t, holder.Rollback())

	var res sqlonce.Result
	must(t, withTx(func(tx *sql.Tx) error {
		var err error
		res, err = store.Do(ctx, tx, req, func(ctx context.Context) error { return ledger(tx) })
		return err
	}))
	if !res.AlreadyDone() {
		t.Errorf("the victim's retry: got %v, want already done", res)
	}
	var n int
	must(t, db.QueryRowContext(ctx, "SELECT count(*) FROM ledger WHERE ref = 'k'").Scan(&n))
	if n != 1 {
		t.Errorf("ledger rows for k = %d, want 1", n)
	}
}
