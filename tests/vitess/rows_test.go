package vitess

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/statemachine"
)

// accountStates is the state machine of the tests' accounts.
var accountStates = statemachine.Must(statemachine.New(
	statemachine.Edge("created", "paid"),
	statemachine.Edge("paid", "shipped"),
))

// openAccounts creates n accounts per tenant, named prefix and a number,
// state created, version 1, balance 1000, on each tenant's shard.
func openAccounts(t *testing.T, db *sql.DB, tenants []int64, prefix string, n int) {
	t.Helper()
	for _, tenant := range tenants {
		for i := range n {
			if _, err := db.Exec("INSERT INTO accounts (tenant_id, account_id, status, version, balance) VALUES (?, ?, 'created', 1, 1000)", tenant, fmt.Sprintf("%s%d", prefix, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// transition moves tenant's account from -> to in tx with statemachine,
// its UPDATE and its locking read of the state on the tenant's shard.
func transition(ctx context.Context, tx *sql.Tx, tenant int64, account, from, to string) (sqlonce.Result, error) {
	return accountStates.Transition(ctx, from, to,
		func(ctx context.Context) (int64, error) {
			r, err := tx.ExecContext(ctx, "UPDATE accounts SET status = ? WHERE tenant_id = ? AND account_id = ? AND status = ?", to, tenant, account, from)
			if err != nil {
				return 0, err
			}
			return r.RowsAffected()
		},
		func(ctx context.Context) (string, error) {
			var s string
			err := tx.QueryRowContext(ctx, "SELECT status FROM accounts WHERE tenant_id = ? AND account_id = ? LOCK IN SHARE MODE", tenant, account).Scan(&s)
			return s, err
		})
}

// debit takes 10 from tenant's account in tx if its version is still
// expected, judged by optimistic.Update.
func debit(ctx context.Context, tx *sql.Tx, tenant int64, account string, expected int64) (sqlonce.Result, error) {
	r, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10, version = version + 1 WHERE tenant_id = ? AND account_id = ? AND version = ?", tenant, account, expected)
	if err != nil {
		return sqlonce.Result{}, err
	}
	rows, err := r.RowsAffected()
	if err != nil {
		return sqlonce.Result{}, err
	}
	return optimistic.Update(ctx, rows, expected, func(ctx context.Context) (int64, error) {
		var v int64
		err := tx.QueryRowContext(ctx, "SELECT version FROM accounts WHERE tenant_id = ? AND account_id = ? LOCK IN SHARE MODE", tenant, account).Scan(&v)
		return v, err
	})
}

// TestRowsOverShards: optimistic.Update and statemachine's Transition
// through vtgate, on accounts of tenants on both shards, 8 goroutines
// racing on each account: each pays it (created -> paid) and debits it
// at version 1, and writes an effect row (an order of the tenant) in the
// same transaction when its call answered FirstRun. Each account is paid
// once and debited once, counted in the database; the racers that lost
// answer AlreadyDone.
func TestRowsOverShards(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tenantsN, accountsN, racers = 8, 3, 8
	base := int64(9_800_000)
	var tenants []int64
	for i := range int64(tenantsN) {
		tenants = append(tenants, base+i)
	}
	prefix := fmt.Sprintf("acct%d-", time.Now().UnixNano()) // this run's (-count)
	openAccounts(t, db, tenants, prefix, accountsN)

	var firstRuns, alreadyDone, retried atomic.Int64
	// once runs call (Transition or Update) and its effect in one
	// transaction, again while the error is retryable.
	once := func(tenant int64, effect string, call func(tx *sql.Tx) (sqlonce.Result, error)) error {
		for try := 0; ; try++ {
			err := func() error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				res, err := call(tx)
				if err != nil {
					return err
				}
				if res.FirstRun() {
					if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, effect); err != nil {
						return err
					}
				}
				if err := tx.Commit(); err != nil {
					return err
				}
				if res.FirstRun() {
					firstRuns.Add(1)
				} else {
					alreadyDone.Add(1)
				}
				return nil
			}()
			if err != nil && sqlonce.IsRetryable(err) && try < 30 {
				retried.Add(1)
				continue
			}
			return err
		}
	}
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		for a := range accountsN {
			account := fmt.Sprintf("%s%d", prefix, a)
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := once(tenant, "paid-"+account, func(tx *sql.Tx) (sqlonce.Result, error) {
						return transition(ctx, tx, tenant, account, "created", "paid")
					}); err != nil {
						t.Errorf("tenant %d %s: Transition: %v", tenant, account, err)
					}
					if err := once(tenant, "debit-"+account, func(tx *sql.Tx) (sqlonce.Result, error) {
						return debit(ctx, tx, tenant, account, 1)
					}); err != nil {
						t.Errorf("tenant %d %s: Update: %v", tenant, account, err)
					}
				}()
			}
		}
	}
	wg.Wait()

	var violations int
	for _, tenant := range tenants {
		for a := range accountsN {
			account := fmt.Sprintf("%s%d", prefix, a)
			var status string
			var version, balance int64
			if err := db.QueryRow("SELECT status, version, balance FROM accounts WHERE tenant_id = ? AND account_id = ?", tenant, account).Scan(&status, &version, &balance); err != nil {
				t.Fatal(err)
			}
			paid := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, "paid-"+account)
			debits := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, "debit-"+account)
			if status != "paid" || version != 2 || balance != 990 || paid != 1 || debits != 1 {
				violations++
				t.Errorf("tenant %d %s: status %s, version %d, balance %d, %d payment effects, %d debit effects; want paid, 2, 990, 1, 1",
					tenant, account, status, version, balance, paid, debits)
			}
		}
	}
	if want := int64(2 * tenantsN * accountsN); firstRuns.Load() != want {
		t.Errorf("%d first runs, want %d", firstRuns.Load(), want)
	}
	perShard := shardCounts(t, c, "SELECT COUNT(*) FROM accounts WHERE tenant_id BETWEEN ? AND ? AND account_id LIKE ?", base, base+tenantsN, prefix+"%")
	if perShard["-80"] == 0 || perShard["80-"] == 0 {
		t.Errorf("accounts per shard %v: want some on both", perShard)
	}
	t.Logf("%d accounts (%v per shard), %d racers each: first runs %d, already done %d, retried %d; violations %d",
		tenantsN*accountsN, perShard, racers, firstRuns.Load(), alreadyDone.Load(), retried.Load(), violations)
}

// TestRowsCrossShard: in a transaction whose first write is on tenant a's
// shard, a Transition or a version-checked UPDATE of tenant b's account
// (the other shard) is refused with vtgate's cross-shard error
// (mysqldriver.IsCrossShard, not retryable), never FirstRun or
// AlreadyDone, and nothing commits: neither a's row nor b's account.
func TestRowsCrossShard(t *testing.T) {
	_, db := setup(t)
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	// Fresh accounts of their own: other tests' tenants a and b may hold
	// accounts already.
	account := fmt.Sprintf("cross-%d", time.Now().UnixNano())
	for _, tenant := range []int64{a, b} {
		if _, err := db.Exec("INSERT INTO accounts (tenant_id, account_id, status, version, balance) VALUES (?, ?, 'created', 1, 1000)", tenant, account); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		call func(tx *sql.Tx) (sqlonce.Result, error)
	}{
		{"Transition", func(tx *sql.Tx) (sqlonce.Result, error) { return transition(ctx, tx, b, account, "created", "paid") }},
		{"Update", func(tx *sql.Tx) (sqlonce.Result, error) { return debit(ctx, tx, b, account, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := account + "-" + tc.name
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, first); err != nil {
				t.Fatal(err)
			}
			res, err := tc.call(tx)
			if err == nil || !mysqldriver.IsCrossShard(err) || sqlonce.IsRetryable(err) {
				t.Errorf("%s on the other shard: %v, %v (IsCrossShard %v, IsRetryable %v); want the cross-shard refusal, not retryable",
					tc.name, res, err, mysqldriver.IsCrossShard(err), sqlonce.IsRetryable(err))
			}
			_ = tx.Commit() // answers OK on nothing: vtgate rolled the transaction back
			if n := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", a, first); n != 0 {
				t.Errorf("%d rows of the refused transaction committed", n)
			}
			var status string
			var version int64
			if err := db.QueryRow("SELECT status, version FROM accounts WHERE tenant_id = ? AND account_id = ?", b, account).Scan(&status, &version); err != nil {
				t.Fatal(err)
			}
			if status != "created" || version != 1 {
				t.Errorf("the other shard's account: %s, version %d; want created, 1", status, version)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
