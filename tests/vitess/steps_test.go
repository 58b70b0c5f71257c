package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestStepsOverShards: dedupe's RunSteps through vtgate, an operation of
// a database step, an outside step and a last database step, each
// database step writing an order of the key's tenant (the key's scope):
// 6 goroutines race on each of 3 keys of 6 tenants over both shards,
// calling again while another holds the key. Each database step's row
// commits once per key, counted in the database, the outside step runs
// once, one call per key answers FirstRun and the others replay its
// response.
func TestStepsOverShards(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const tenants, keys, racers = 6, 3, 6
	base := int64(9_820_000)
	run := time.Now().UnixNano() // keys of this run only (-count)
	var mu sync.Mutex
	outside := map[string]int{}
	insert := func(ctx context.Context, tx *sql.Tx, st dedupe.StepState, step string) error {
		tenant, err := strconv.ParseInt(string(st.Input), 10, 64)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, st.Key[:16]+"-"+step)
		return err
	}
	op := &dedupe.Operation[*sql.Tx]{Name: "ship", Steps: []dedupe.Step[*sql.Tx]{
		{Name: "reserve", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			return []byte("reserved"), insert(ctx, tx, st, "reserve")
		}},
		{Name: "notify", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			mu.Lock()
			outside[st.Key]++
			mu.Unlock()
			return []byte("notified"), nil
		}},
		{Name: "order", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			return []byte("done-" + st.Key[:16]), insert(ctx, tx, st, "order")
		}},
	}}
	var firstRuns, replays, inProgress, retried atomic.Int64
	var wg sync.WaitGroup
	for ti := range int64(tenants) {
		tenant := base + ti
		scope := strconv.FormatInt(tenant, 10)
		for k := range keys {
			req := dedupe.Request{Scope: scope, Key: fmt.Sprintf("steps%d-%d", k, run)}
			want := "done-" + dedupe.StepKey(req.Scope, req.Key, "order")[:16]
			for range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for try := 0; ; try++ {
						res, err := store.RunSteps(ctx, req, []byte(scope), op)
						switch {
						case err == nil && string(res.Response) != want:
							t.Errorf("%s/%s: %v with response %q, want %q", scope, req.Key, res, res.Response, want)
						case err == nil && res.FirstRun():
							firstRuns.Add(1)
						case err == nil:
							replays.Add(1)
						case errors.Is(err, sqlonce.ErrInProgress) && try < 2000:
							// Another racer runs the steps: call again, as a
							// client would.
							inProgress.Add(1)
							time.Sleep(5 * time.Millisecond)
							continue
						case sqlonce.IsRetryable(err) && try < 2000:
							retried.Add(1)
							continue
						default:
							t.Errorf("%s/%s: %v", scope, req.Key, err)
						}
						return
					}
				}()
			}
		}
	}
	wg.Wait()

	var violations int
	for ti := range int64(tenants) {
		tenant := base + ti
		scope := strconv.FormatInt(tenant, 10)
		for k := range keys {
			key := fmt.Sprintf("steps%d-%d", k, run)
			for _, step := range []string{"reserve", "order"} {
				id := dedupe.StepKey(scope, key, step)[:16] + "-" + step
				if n := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id = ? AND order_id = ?", tenant, id); n != 1 {
					violations++
					t.Errorf("%s/%s step %s: %d rows, want 1", scope, key, step, n)
				}
			}
			if n := outside[dedupe.StepKey(scope, key, "notify")]; n != 1 {
				t.Errorf("%s/%s: outside step ran %d times, want 1 (no run stopped)", scope, key, n)
			}
		}
	}
	if firstRuns.Load() != tenants*keys {
		t.Errorf("%d first runs, want %d", firstRuns.Load(), tenants*keys)
	}
	perShard := map[string]int{}
	for ti := range int64(tenants) {
		scope := strconv.FormatInt(base+ti, 10)
		perShard[shardOf(t, db, scope)] += keys
	}
	if perShard["-80"] == 0 || perShard["80-"] == 0 {
		t.Errorf("operations per shard %v: want some on both", perShard)
	}
	t.Logf("%d keys, %d racers each: first runs %d, replays %d, in progress (called again) %d, retried %d; violations %d; operations per shard %v",
		tenants*keys, racers, firstRuns.Load(), replays.Load(), inProgress.Load(), retried.Load(), violations, perShard)
}

// TestStepsCrossShard: a database step of RunSteps that writes its
// tenant's row and then a row of a tenant on the other shard. Returning
// vtgate's refusal, the call fails with it; swallowing it (the step
// answers a result as if all went well), in a middle step (whose result
// is saved as a recovery point) or in the last (whose result becomes the
// response), the call must fail too, with an error IsCrossShard
// recognises, never FirstRun: vtgate rolled the step's transaction back,
// and the write that records the step would have committed alone, in
// autocommit. Nothing of the step commits and the key is not done.
func TestStepsCrossShard(t *testing.T) {
	_, db := setup(t)
	store, err := dedupe.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	scope := strconv.FormatInt(a, 10)
	// step writes a's row, then b's, and returns the refusal or swallows it.
	step := func(name string, swallow bool) func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
		return func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			id := st.Key[:16] + "-" + name
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, id); err != nil {
				return nil, err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", b, id)
			if !mysqldriver.IsCrossShard(err) {
				t.Errorf("the other shard's write: %v, want vtgate's cross-shard refusal", err)
			}
			if swallow {
				return []byte("ok"), nil
			}
			return nil, err
		}
	}
	fine := func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) { return []byte("fine"), nil }
	for _, tc := range []struct {
		name  string
		steps []dedupe.Step[*sql.Tx]
	}{
		{"returned", []dedupe.Step[*sql.Tx]{{Name: "cross", InTx: step("cross", false)}, {Name: "last", InTx: fine}}},
		{"swallowed-middle", []dedupe.Step[*sql.Tx]{{Name: "cross", InTx: step("cross", true)}, {Name: "last", InTx: fine}}},
		{"swallowed-last", []dedupe.Step[*sql.Tx]{{Name: "first", InTx: fine}, {Name: "cross", InTx: step("cross", true)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("steps-cross-%s-%d", tc.name, time.Now().UnixNano())
			op := &dedupe.Operation[*sql.Tx]{Name: "cross", Steps: tc.steps}
			res, err := store.RunSteps(ctx, dedupe.Request{Scope: scope, Key: key}, nil, op)
			id := dedupe.StepKey(scope, key, "cross")[:16] + "-cross"
			nOrders := count(t, db, "SELECT COUNT(*) FROM orders WHERE tenant_id IN (?, ?) AND order_id = ?", a, b, id)
			if err == nil {
				t.Fatalf("answered %v for a step vtgate rolled back (%d of its rows committed)", res, nOrders)
			}
			if !mysqldriver.IsCrossShard(err) || sqlonce.IsRetryable(err) {
				t.Errorf("error %v: IsCrossShard %v, IsRetryable %v; want true, false", err, mysqldriver.IsCrossShard(err), sqlonce.IsRetryable(err))
			}
			if nOrders != 0 {
				t.Errorf("%d rows of the refused step committed", nOrders)
			}
			// The key is not done: a repeat does not replay a response.
			if res, err := store.RunSteps(ctx, dedupe.Request{Scope: scope, Key: key}, nil, op); err == nil {
				t.Errorf("repeat: %v, %q; want an error (the step is refused again, or the key is held)", res, res.Response)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
