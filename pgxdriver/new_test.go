package pgxdriver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// callerTx is any pgx.Tx: one satisfies Beginner (Begin opens a savepoint).
type callerTx struct{ pgx.Tx }

// New refuses a transaction as its handle: the driver's own transactions
// would be savepoints in the caller's, so a Claim's lease would be seen by
// no other instance and a Run would answer FirstRun for work the caller
// may roll back. The error names the fix. No SQL runs.
func TestNewRefusesATransaction(t *testing.T) {
	for name, db := range map[string]pgxdriver.Beginner{
		"pgx.Tx":      callerTx{},
		"*pgxpool.Tx": new(pgxpool.Tx),
	} {
		d, err := pgxdriver.New(db)
		if d != nil || !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "*pgxpool.Pool or a *pgx.Conn") {
			t.Errorf("%s: %v, %v; want ErrInvalidArgument naming the pool or a *pgx.Conn", name, d, err)
		}
	}
	// A pool (unconnected here) is still taken.
	pool, err := pgxpool.New(context.Background(), "postgres://sqlonce@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgxdriver.New(pool); err != nil {
		t.Fatalf("New(pool): %v", err)
	}
}
