package mysqldriver_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
)

// Through Vitess's vtgate: transaction_mode single in the DSN, and the key
// scoped by the tenant whose rows the work writes, so that both live on
// one shard (sqlonce_keys sharded by scope with the vindex of orders'
// tenant_id, docs/deployments.md). Work that writes another tenant's rows
// on another shard is refused, and nothing of the transaction commits.
// (Not run: it needs a vtgate; tests/vitess runs the same.)
func ExampleIsCrossShard() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:15306)/ks?transaction_mode=%27single%27")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := mysqldriver.New(db)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	tenant := int64(42)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	_, err = store.Do(ctx, tx, dedupe.Request{Scope: strconv.FormatInt(tenant, 10), Key: "order-7"}, func(ctx context.Context) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, 'order-7', 100)", tenant)
		return err
	})
	if mysqldriver.IsCrossShard(err) {
		// A statement wrote on a second shard: vtgate rolled the whole
		// transaction back. Running it again cannot help.
		panic(errors.New("the work must stay on the tenant's shard"))
	}
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}
