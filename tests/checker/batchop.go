package checker

import (
	"context"
	"slices"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// batchOp claims a few keys of the Do workload's window in one transaction,
// writing a ledger row for each key it is given: with dedupe.Store.DoBatch
// in a transaction of the worker's, or (own) with Store.RunBatch in one of
// the Store's own. Batches race each other, single Do calls, pairs and
// Store.Run on the same keys, and each key's effect must still be there
// once.
func (w *worker[TTx]) batchOp(own bool) {
	var keys []string
	for range 2 + w.rng.IntN(4) {
		if k := w.key(DoBatch); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if own {
		w.operationOf(RunBatch, w.r.runFaults, func(a *Attempt) { w.runBatchAttempt(a, keys) })
		return
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

// runBatchAttempt is one call of RunBatch with the attempt's fault armed.
// RunBatch owns its transaction, as Run does (see runAttempt): its attempt
// committed when it answered; when it failed after fn completed, the keys
// fn was given are recorded FirstRun, and the error says whether the
// commit is unknown.
func (w *worker[TTx]) runBatchAttempt(a *Attempt, keys []string) {
	a.Run, a.Iso = true, harness.Default
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	defer cancel()
	f := w.newFaultCtl(cancel, a)
	defer f.disarm()
	steps := make([]*Step, len(keys))
	for i, k := range keys {
		steps[i] = a.step("do:"+k, "")
	}
	var (
		fnOK  bool // fn's last call completed
		fnEnd int64
		given []string
	)
	fn := func(ctx context.Context, tx TTx, fresh []string) error {
		a.Calls++
		fnOK = false
		if a.Calls == 1 && a.Fault == FaultKillAsync {
			if err := f.killLater(ctx, tx); err != nil {
				return err
			}
		}
		if a.Calls == 1 {
			f.armNet(ctx, tx)
		}
		for _, k := range fresh {
			if err := w.n.db.Tx(tx).LedgerInsert(ctx, "do:"+k, a.ID); err != nil {
				return err
			}
		}
		if err := f.inFn(ctx, tx); err != nil {
			return err
		}
		fnOK, fnEnd, given = true, w.r.tick(), fresh
		return nil
	}
	res, err := w.callRunBatch(ctx, keys, fn)
	end := w.r.tick()
	a.Err = err
	for i, st := range steps {
		var r sqlonce.Result
		switch {
		case err == nil:
			r = res[i]
		case fnOK && slices.Contains(given, keys[i]):
			r = sqlonce.Result{Outcome: sqlonce.FirstRun}
		}
		st.set(r, err, end)
	}
	switch {
	case err == nil:
		a.Commit = Committed
		if len(given) > 0 {
			a.CommitStart = fnEnd
		}
	case fnOK:
		a.CommitStart = fnEnd
		a.Commit = w.classifyRunCommit(err)
	}
	a.CommitEnd = end
}

// callRunBatch calls RunBatch, recovering the injected panic, which
// RunBatch passes on after rolling back.
func (w *worker[TTx]) callRunBatch(ctx context.Context, keys []string, fn func(ctx context.Context, tx TTx, fresh []string) error) (res []sqlonce.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(injectedPanic); !ok {
				panic(p)
			}
			res, err = nil, errInjectedPanic
		}
	}()
	return w.n.store.RunBatch(ctx, "do", keys, fn)
}
