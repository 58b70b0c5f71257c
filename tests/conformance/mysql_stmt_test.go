package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// The MySQL driver runs its statements prepared on its own *sql.DB. A
// transaction from that handle or from another handle to the same
// database must give the same results.
func TestMySQLDriverHandles(t *testing.T) {
	db := harness.MySQL(t, 8)
	other, err := sql.Open("mysql", db.DSN())
	must(t, err)
	t.Cleanup(func() { other.Close() })
	for name, drv := range map[string]*mysqldriver.Driver{
		"same handle":    db.Driver().(*mysqldriver.Driver),
		"another handle": testdrv.MySQL(t, other),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			store, err := dedupe.New(drv)
			must(t, err)
			req := dedupe.Request{Scope: name, Key: "k", Fingerprint: []byte("fp")}
			for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
				var res sqlonce.Result
				must(t, harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
					var err error
					res, err = store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
						return []byte("answer"), db.Tx(tx).LedgerInsert(ctx, name, 1)
					})
					return err
				}))
				if res.Outcome != want || string(res.Response) != "answer" {
					t.Fatalf("call %d: %v %q, want %v %q", i, res, res.Response, want, "answer")
				}
			}
			other := req
			other.Fingerprint = []byte("other")
			err = harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
				_, err := store.Do(ctx, tx, other, func(context.Context) error { return nil })
				return err
			})
			if !errors.Is(err, sqlonce.ErrKeyReuse) {
				t.Fatalf("other fingerprint: %v, want ErrKeyReuse", err)
			}
			n, err := db.Pool().LedgerCountByRef(ctx, name)
			must(t, err)
			if n != 1 {
				t.Fatalf("ledger rows: %d, want 1", n)
			}
		})
	}
}

// Every connection of the pool sits in a transaction that is about to run
// sqlonce's first statement: none is left to prepare it on. The driver must
// run it unprepared rather than wait for a connection that never comes.
func TestMySQLPreparePoolSaturated(t *testing.T) {
	db := harness.MySQL(t, 8)
	const conns = 4
	pool, err := sql.Open("mysql", db.DSN())
	must(t, err)
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(conns)
	store, err := dedupe.New(testdrv.MySQL(t, pool))
	must(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	txs := make([]*sql.Tx, conns)
	for i := range txs {
		txs[i], err = pool.BeginTx(ctx, nil)
		must(t, err)
	}
	errs := race(conns, func(i int) error {
		tx := txs[i]
		key := fmt.Sprintf("saturated-%d", i)
		if _, err := store.Do(ctx, tx, dedupe.Request{Scope: "pool", Key: key}, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", key)
			return err
		}); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	noErrors(t, errs)
	n, err := db.KeyCount(ctx)
	must(t, err)
	if n != conns {
		t.Fatalf("%d keys recorded, want %d", n, conns)
	}
}
