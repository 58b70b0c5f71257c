package dedupe_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// postgres and mariadb, at the end of example_test.go, connect and create
// the tables these examples use, as a program does at start-up.

// A charge through an outside payment provider cannot sit inside a database
// transaction: a lease keeps duplicates out while it runs, and the recorded
// answer serves every retry after.
func ExampleStore_Claim() {
	ctx := context.Background()
	pool := postgres("dedupe_lease")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "stripe-charges", Key: "order-42"}

	lease, res, err := store.Claim(ctx, req, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("claim:", res)

	// A retry that arrives while the charge is in flight is told so.
	_, _, err = store.Claim(ctx, req, 30*time.Second)
	fmt.Println("duplicate in flight:", errors.Is(err, sqlonce.ErrInProgress))

	chargeID := "ch_3Qx" // what the provider answered; pass lease.Token or the key along
	if err := store.Complete(ctx, lease, []byte(chargeID)); err != nil {
		panic(err)
	}

	_, res, err = store.Claim(ctx, req, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry after completion: %v, %s\n", res, res.Response)
	// Output:
	// claim: first run
	// duplicate in flight: true
	// retry after completion: already done, ch_3Qx
}

// Purge removes expired keys in batches; run it from a ticker in any number
// of instances.
func ExampleStore_Purge() {
	ctx := context.Background()
	pool := postgres("dedupe_purge")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	// Keys that expired an hour ago, written directly for the example.
	if _, err := pool.Exec(ctx, `
		INSERT INTO sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at)
		SELECT 'old', 'k' || i, 1, i, now() - interval '25 hours', now() - interval '1 hour'
		FROM generate_series(1, 2500) AS i`); err != nil {
		panic(err)
	}
	n, err := store.Purge(ctx, 1000)
	if err != nil {
		panic(err)
	}
	fmt.Println("purged:", n)
	// Output: purged: 2500
}
