package conformance

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestMySQLStepsFirstStepLockWait: RunSteps' first database step holds the
// key's row until it commits; a duplicate whose session gives up waiting
// (innodb_lock_wait_timeout, 1205) gets sqlonce.ErrInProgress, retryable,
// with the 1205 in it, and runs nothing; a Store built WithAwaitResult
// waits on, and ctx's end names both. Once the first run commits, the
// duplicate answers AlreadyDone.
func TestMySQLStepsFirstStepLockWait(t *testing.T) {
	ctx := ctxT(t)
	db := harness.MySQL(t, 8)
	sep := "?"
	if strings.Contains(db.DSN(), "?") {
		sep = "&"
	}
	impatient, err := sql.Open("mysql", db.DSN()+sep+"innodb_lock_wait_timeout=1")
	must(t, err)
	t.Cleanup(func() { impatient.Close() })

	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseFirst := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseFirst)
	var calls atomic.Int32
	op := &dedupe.Operation[*sql.Tx]{Name: "slow", Lease: time.Minute, Steps: []dedupe.Step[*sql.Tx]{
		{Name: "write", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			if calls.Add(1) == 1 {
				close(started)
				<-release
			}
			return []byte("written"), db.Tx(tx).LedgerInsert(ctx, "slow", 1)
		}},
	}}
	req := dedupe.Request{Scope: "steps", Key: "slow"}
	first, err := dedupe.New(db.Driver())
	must(t, err)
	firstDone := make(chan error, 1)
	go func() {
		res, err := first.RunSteps(ctx, req, nil, op)
		if err == nil && !res.FirstRun() {
			err = errors.New("the first run did not run")
		}
		firstDone <- err
	}()
	<-started

	dup, err := dedupe.New(testdrv.MySQL(t, impatient))
	must(t, err)
	_, err = dup.RunSteps(ctx, req, nil, op)
	var myErr *mysql.MySQLError
	if !errors.Is(err, sqlonce.ErrInProgress) || !sqlonce.IsRetryable(err) || !errors.As(err, &myErr) || myErr.Number != 1205 {
		t.Fatalf("duplicate past the lock wait: %v, want ErrInProgress, retryable, with 1205", err)
	}

	awaiting, err := dedupe.New(testdrv.MySQL(t, impatient), dedupe.WithAwaitResult())
	must(t, err)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = awaiting.RunSteps(actx, req, nil, op)
	cancel()
	if !errors.Is(err, sqlonce.ErrInProgress) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("awaiting duplicate, its ctx ended: %v, want ErrInProgress and DeadlineExceeded", err)
	}

	releaseFirst()
	must(t, <-firstDone)
	want := "written"
	res, err := awaiting.RunSteps(ctx, req, nil, op)
	wantOutcome(t, "after the first run", res, err, sqlonce.AlreadyDone, &want)
	if n := calls.Load(); n != 1 {
		t.Fatalf("the step ran %d times, want once", n)
	}
	n, err := db.Pool().LedgerCountByRef(ctx, "slow")
	must(t, err)
	if n != 1 {
		t.Fatalf("%d ledger rows, want 1", n)
	}
}
