package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// noWaitKeys is how many keys get two concurrent no-wait claims, one on
// node 1 and one on node 2.
const noWaitKeys = 30

// TestNoWaitAcrossNodes pins down what WithNoWait does on Galera, as
// docs/deployments.md states it: a key held by an open transaction on
// another node is not seen (row locks are each node's own), so both
// duplicates run the work; the cluster lets one commit, the other's
// COMMIT fails with a deadlock error that sqlonce.IsRetryable accepts, and
// its retry answers AlreadyDone. Exactly once holds; the "in progress"
// answer (an HTTP 409) is given only for a duplicate on the holder's own
// node.
func TestNoWaitAcrossNodes(t *testing.T) {
	c := galera.Shared(t)
	ctx := context.Background()
	dbs := harness.MySQLNodes(t, 4, c.DSNs("", galera.Params...)...)[:2]
	var stores []*dedupe.Store[*sql.Tx]
	for _, db := range dbs {
		s, err := dedupe.New(db.Driver(), dedupe.WithNoWait())
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	var firstCommitted, alreadyDone, inProgress, retryableAtCommit, other int
	for k := range noWaitKeys {
		key := fmt.Sprint(k)
		ref := "nw:" + key
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tx, err := db.Begin(ctx, harness.Default)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := stores[i].Do(ctx, tx, dedupe.Request{Scope: "nw", Key: key}, func(ctx context.Context) error {
					if err := db.Tx(tx).LedgerInsert(ctx, ref, int64(i)); err != nil {
						return err
					}
					time.Sleep(50 * time.Millisecond) // both hold the key at once
					return nil
				})
				if err == nil && res.FirstRun() {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && res.FirstRun():
					firstCommitted++
				case err == nil && res.AlreadyDone():
					// On a loaded machine one of the two may begin after
					// the other committed: the answer of any later repeat.
					alreadyDone++
				case errors.Is(err, sqlonce.ErrInProgress):
					inProgress++
				case sqlonce.IsRetryable(err):
					retryableAtCommit++
				default:
					other++
					t.Errorf("key %s on node %d: %v %v", key, i+1, res, err)
				}
			}()
		}
		wg.Wait()
		// The retry of whoever lost answers AlreadyDone.
		err := harness.WithTx(ctx, dbs[1], harness.Default, func(tx *sql.Tx) error {
			res, err := stores[1].Do(ctx, tx, dedupe.Request{Scope: "nw", Key: key}, func(context.Context) error { return errors.New("ran twice") })
			if err == nil && !res.AlreadyDone() {
				err = fmt.Errorf("retry: %v, want AlreadyDone", res)
			}
			return err
		})
		if err != nil {
			t.Errorf("key %s: %v", key, err)
		}
	}
	counts, err := dbs[0].Pool().LedgerCountPerRef(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ref, n := range counts {
		if n != 1 {
			t.Errorf("%s: %d effects, want 1", ref, n)
		}
	}
	t.Logf("%d keys, a no-wait claim on node 1 and node 2 at once: %d FirstRun committed, %d already done, %d in progress, %d retryable failures (at COMMIT), %d other; %d effects",
		noWaitKeys, firstCommitted, alreadyDone, inProgress, retryableAtCommit, other, len(counts))
	if firstCommitted != noWaitKeys || len(counts) != noWaitKeys {
		t.Errorf("%d FirstRun committed and %d effects for %d keys; want one each", firstCommitted, len(counts), noWaitKeys)
	}
}
