package checker

import (
	"context"
	"slices"

	"github.com/sqlonce/sqlonce"
)

// batchOp claims a few keys of the Do workload's window in one transaction
// with dedupe.Store.DoBatch, writing a ledger row for each key it is given:
// batches race each other, single Do calls, pairs and Store.Run on the
// same keys, and each key's effect must still be there once.
func (w *worker[TTx]) batchOp() {
	var keys []string
	for range 2 + w.rng.IntN(4) {
		if k := w.key(DoBatch); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	w.operation(DoBatch, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			steps := make([]*Step, len(keys))
			for i, k := range keys {
				steps[i] = a.step("do:"+k, "")
			}
			res, err := w.n.store.DoBatch(ctx, tx, "do", keys, func(ctx context.Context, fresh []string) error {
				for _, k := range fresh {
					if err := w.n.db.Tx(tx).LedgerInsert(ctx, "do:"+k, a.ID); err != nil {
						return err
					}
				}
				return f.inFn(ctx, tx)
			})
			at := w.r.tick()
			for i, st := range steps {
				var r sqlonce.Result
				if err == nil {
					r = res[i]
				}
				st.set(r, err, at)
			}
			return err
		})
	})
}
