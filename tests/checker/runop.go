package checker

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// KindRun is the Step.Kind of a dedupe.Store.Run: the writer of its key's
// effect when it reports FirstRun, an observer of it when AlreadyDone.
const KindRun = "run"

// runTarget is a key family the StoreRun workload hits: the scope of its
// keys and the window it draws them from. Lease keys are run at the lease
// workload's pinned clock, so that Run finds lapsed leases and takes them
// over as a claim would.
type runTarget struct {
	scope, window string
	pinned        bool
}

// targetsOfRun lists the key families of the running workloads that Run
// shares: the Do keys (with the pair and nested workloads), the DoResponse
// keys, the lease keys. Run alone gets keys of its own (scope "run").
func (r *run[TTx]) targetsOfRun() []runTarget {
	if !r.enabled(StoreRun) {
		return nil
	}
	var ts []runTarget
	if w := r.windowOf(DoPair); r.enabled(w) {
		ts = append(ts, runTarget{scope: "do", window: w})
	}
	if r.enabled(DoResponse) {
		ts = append(ts, runTarget{scope: "resp", window: DoResponse})
	}
	if r.enabled(Lease) {
		ts = append(ts, runTarget{scope: "lease", window: Lease, pinned: true})
	}
	if len(ts) == 0 {
		ts = append(ts, runTarget{scope: "run", window: StoreRun})
	}
	return ts
}

// runOp runs one operation through dedupe.Store.Run on a key that the Do,
// DoResponse or lease workload is hitting too. Its fn writes the key's
// ledger row, named by the attempt, as theirs do, and returns a response
// that names the attempt: Run records it, and every repeat, by Run or by
// the others, must get it back.
func (w *worker[TTx]) runOp() {
	t := w.r.runTargets[w.rng.IntN(len(w.r.runTargets))]
	key := w.key(t.window)
	c := DedupeCall{Scope: t.scope, Key: key, Ref: t.scope + ":" + key, Respond: true, Shape: w.rng.IntN(len(runShapes))}
	for w.r.cfg.NoLockWait && runShapes[c.Shape].noWait {
		c.Shape = w.rng.IntN(len(runShapes))
	}
	if t.scope == "lease" {
		w.r.leases.Store(key, true)
	}
	w.operationOf(StoreRun+" ("+runShapes[c.Shape].name+") on "+t.scope, w.r.runFaults, func(a *Attempt) {
		a.NoWait = runShapes[c.Shape].noWait
		w.runAttempt(a, c, t.pinned)
	})
}

// runAttempt is one call of Run with the attempt's fault armed. Run owns
// its transaction, so the attempt's commit state comes from what Run
// answered and from how its fn last ended: FirstRun is a commit; an error
// after fn completed is a commit whose outcome the error may leave unknown,
// which the database decides afterwards. fn may run several times (Run
// starts over after a deadlock, or when the key was recorded meanwhile);
// the effects are counted in the database, never by calls of fn.
func (w *worker[TTx]) runAttempt(a *Attempt, c DedupeCall, pinned bool) {
	a.Run, a.Iso = true, harness.Default
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	defer cancel()
	if pinned {
		ctx = testclock.With(ctx, w.r.vclock.Now())
	}
	f := w.newFaultCtl(cancel, a)
	defer f.disarm()
	st := a.step(c.Ref, KindRun)
	var (
		fnOK   bool // fn's last call returned its response
		fnEnd  int64
		fnResp []byte
	)
	fn := func(ctx context.Context, tx TTx) ([]byte, error) {
		a.Calls++
		fnOK = false
		if a.Calls == 1 && a.Fault == FaultKillAsync {
			if err := f.killLater(ctx, tx); err != nil {
				return nil, err
			}
		}
		if a.Calls == 1 {
			f.armNet(ctx, tx)
		}
		if err := w.n.db.Tx(tx).LedgerInsert(ctx, c.Ref, a.ID); err != nil {
			return nil, err
		}
		if err := f.inFn(ctx, tx); err != nil {
			return nil, err
		}
		resp := []byte(fmt.Sprintf("%s by a%d (run)", c.Ref, a.ID))
		fnOK, fnEnd, fnResp = true, w.r.tick(), resp
		return resp, nil
	}
	res, err := w.callRun(ctx, c, fn)
	end := w.r.tick()
	st.set(res, err, end)
	a.Err = err
	switch {
	case err == nil:
		// Run ended: its FirstRun committed, or it read the key done.
		a.Commit = Committed
		if res.FirstRun() {
			a.CommitStart = fnEnd
		}
	case fnOK:
		// fn completed and Run failed after it: in its commit, or in the
		// record before it.
		st.Outcome, st.Response = sqlonce.FirstRun, fnResp
		a.CommitStart = fnEnd
		a.Commit = w.classifyRunCommit(err)
	}
	a.CommitEnd = end
}

// callRun calls the Runner, recovering the injected panic, which Run
// passes on after rolling back.
func (w *worker[TTx]) callRun(ctx context.Context, c DedupeCall, fn func(ctx context.Context, tx TTx) ([]byte, error)) (res sqlonce.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(injectedPanic); !ok {
				panic(p)
			}
			res, err = sqlonce.Result{}, errInjectedPanic
		}
	}()
	return w.r.cfg.Run(ctx, w.n.db, c, fn)
}

// classifyRunCommit is classifyCommit for an error of Run after its fn
// completed. ErrStaleRead is Run's INSERT of the key refused (another
// transaction recorded it): that transaction rolled back. ErrInProgress
// and ErrKeyReuse come from the lookup that starts an attempt, before fn:
// Run started over after fn's transaction failed, which it does only for
// failures that rolled that transaction back.
func (w *worker[TTx]) classifyRunCommit(err error) CommitState {
	if errors.Is(err, sqlonce.ErrStaleRead) || errors.Is(err, sqlonce.ErrInProgress) || errors.Is(err, sqlonce.ErrKeyReuse) {
		return RolledBack
	}
	return w.classifyCommit(err)
}
