package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// Store.Run through pgx holds an advisory lock on its key while fn runs.
// Advisory locks belong to the database, not to a schema: two services
// (or tenants) keeping sqlonce's tables in schemas of one database must not
// wait on each other's keys. A Run of a key in schema A, held open, leaves
// a Run of the same scope and key in schema B free to run and commit.
func TestPgxRunLockIsPerSchema(t *testing.T) {
	a := testdb.NewPostgres(t, 2)
	b := testdb.NewPostgres(t, 2)
	storeA, err := dedupe.New(testdrv.Pgx(t, a.Pool))
	if err != nil {
		t.Fatal(err)
	}
	storeB, err := dedupe.New(testdrv.Pgx(t, b.Pool))
	if err != nil {
		t.Fatal(err)
	}
	req := dedupe.Request{Scope: "tenant", Key: "same-key"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	inFn, release := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		_, err := storeA.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			close(inFn)
			<-release
			return []byte("a"), nil
		})
		doneA <- err
	}()
	select {
	case <-inFn:
	case err := <-doneA:
		t.Fatalf("Run in schema A ended before fn: %v", err)
	}

	// Schema B's Run must finish while A's still holds its key. Were the
	// lock shared, it would wait for A, which waits for this test.
	ctxB, cancelB := context.WithTimeout(ctx, 30*time.Second)
	defer cancelB()
	res, err := storeB.Run(ctxB, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		return []byte("b"), nil
	})
	close(release)
	if err != nil {
		t.Fatalf("Run in schema B while schema A's run of the same key was open: %v", err)
	}
	if res.Outcome != sqlonce.FirstRun {
		t.Fatalf("schema B: %v, want FirstRun", res.Outcome)
	}
	if err := <-doneA; err != nil {
		t.Fatalf("Run in schema A: %v", err)
	}
	for _, db := range []*testdb.Postgres{a, b} {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM sqlonce_keys WHERE idempotency_key = 'same-key'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("schema %s holds %d keys, want 1", db.Schema, n)
		}
	}
}
