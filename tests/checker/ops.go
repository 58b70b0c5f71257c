package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/unique"
)

func (w *worker[TTx]) loop() {
	ops := w.r.cfg.Ops
	for !w.r.stop.Load() {
		switch op := ops[w.rng.IntN(len(ops))]; op {
		case Do:
			w.doOp(Do, "do", false)
		case DoResponse:
			w.doOp(DoResponse, "resp", true)
		case DoPair:
			w.pairOp(DoPair, false, false)
		case DoNested:
			w.pairOp(DoNested, true, false)
		case DoNestedText:
			w.pairOp(DoNestedText, true, true)
		case Unique:
			w.uniqueOp()
		case UniqueOne:
			w.uniqueOneOp()
		case UniqueRows:
			w.uniqueRowsOp()
		case Optimistic:
			w.optimisticOp()
		case StateMachine:
			w.stateMachineOp()
		case Lease:
			w.leaseOp(w.key(Lease))
		case StoreRun:
			w.runOp()
		case LeaseDeadline:
			w.leaseDeadlineOp()
		case DoBatch:
			w.batchOp(false)
		case RunBatch:
			w.batchOp(true)
		case Steps:
			w.stepsOp()
		default:
			panic("checker: unknown workload " + op)
		}
	}
}

// windowOf names the key window a workload draws from: the pair and
// nested workloads share the Do workload's keys, and the unique forms the
// Unique workload's, so that all their calls collide.
func (r *run[TTx]) windowOf(op string) string {
	for _, group := range [][]string{{Do, DoPair, DoNested, DoNestedText, DoBatch, RunBatch}, {Unique, UniqueOne, UniqueRows}} {
		if !slices.Contains(group, op) {
			continue
		}
		for _, w := range group {
			if r.enabled(w) {
				return w
			}
		}
	}
	return op
}

// key picks a live key of the workload's window. The window slides by one
// key every Hits picks, so each key gets about Hits operations, most of
// them while other workers hit it too.
func (w *worker[TTx]) key(op string) string {
	n := w.r.windows[w.r.windowOf(op)].Add(1)
	base := n / int64(w.r.cfg.Hits)
	return strconv.FormatInt(base+w.rng.Int64N(int64(w.r.cfg.Keys)), 10)
}

// dedupeStep runs one dedupe call whose work writes the key's ledger row,
// with the attempt's id as amount so that the database names its writer.
// inner, if set, runs inside the work (the nested workload).
func (w *worker[TTx]) dedupeStep(ctx context.Context, tx TTx, a *Attempt, f *faultCtl[TTx], scope, key string, respond bool, inner func(ctx context.Context) error) error {
	c := DedupeCall{Scope: scope, Key: key, Ref: scope + ":" + key, Respond: respond}
	st := a.step(c.Ref, "")
	res, err := w.r.cfg.Dedupe(ctx, w.n.db, tx, c, func(ctx context.Context) ([]byte, error) {
		if err := w.n.db.Tx(tx).LedgerInsert(ctx, c.Ref, a.ID); err != nil {
			return nil, err
		}
		if inner != nil {
			if err := inner(ctx); err != nil {
				return nil, err
			}
		}
		if err := f.inFn(ctx, tx); err != nil {
			return nil, err
		}
		if respond {
			return []byte(fmt.Sprintf("%s by a%d", c.Ref, a.ID)), nil
		}
		return nil, nil
	})
	st.set(res, err, w.r.tick())
	return err
}

func (w *worker[TTx]) doOp(op, scope string, respond bool) {
	key := w.key(op)
	w.operation(op, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			return w.dedupeStep(ctx, tx, a, f, scope, key, respond, nil)
		})
	})
}

// pairOp claims two keys in one transaction, in a random order: workers
// holding one key and waiting for the other deadlock, and REPEATABLE READ /
// SERIALIZABLE transactions meet keys committed after their snapshot.
// Nested, the second claim runs inside the work of the first, so that the
// deadlock fails the first one's work; asText, that work reports the
// failure as text, without wrapping it.
func (w *worker[TTx]) pairOp(op string, nested, asText bool) {
	// Keys pair up (2j, 2j+1), so that workers meet on the same pair in
	// both orders.
	n, _ := strconv.ParseInt(w.key(op), 10, 64)
	k1, k2 := strconv.FormatInt(n, 10), strconv.FormatInt(n^1, 10)
	if w.rng.IntN(2) == 0 {
		k1, k2 = k2, k1
	}
	w.operation(op, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			if nested {
				return w.dedupeStep(ctx, tx, a, f, "do", k1, false, func(ctx context.Context) error {
					err := w.dedupeStep(ctx, tx, a, f, "do", k2, false, nil)
					if err != nil && asText {
						return fmt.Errorf("inner key %s: %v", k2, err)
					}
					return err
				})
			}
			if err := w.dedupeStep(ctx, tx, a, f, "do", k1, false, nil); err != nil {
				return err
			}
			return w.dedupeStep(ctx, tx, a, f, "do", k2, false, nil)
		})
	})
}

// uniqueOp inserts the order of a code; the order's customer names the
// attempt that wrote it.
func (w *worker[TTx]) uniqueOp() {
	code := "u:" + w.key(Unique)
	w.operation(Unique, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step(code, "")
			res, err := w.n.ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				if _, err := w.n.db.Tx(tx).OrderInsert(ctx, code, "a"+strconv.FormatInt(a.ID, 10), a.ID); err != nil {
					return err
				}
				return f.inFn(ctx, tx)
			})
			st.set(res, err, w.r.tick())
			return err
		})
	})
}

// uniqueOneOp is uniqueOp with InsertOne: its insert is the one INSERT,
// and the faults strike after it, in the caller's own work.
func (w *worker[TTx]) uniqueOneOp() {
	code := "u:" + w.key(UniqueOne)
	w.operation(UniqueOne, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step(code, "")
			res, err := w.n.ins.InsertOne(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := w.n.db.Tx(tx).OrderInsert(ctx, code, "a"+strconv.FormatInt(a.ID, 10), a.ID)
				return err
			})
			if err == nil {
				err = f.inFn(ctx, tx)
			}
			st.set(res, err, w.r.tick())
			return err
		})
	})
}

// uniqueRowsOp inserts the order with ON CONFLICT (code) DO NOTHING and
// judges the rows with unique.Inserted; the faults strike between the
// statement and the judgment, as optimisticOp's do.
func (w *worker[TTx]) uniqueRowsOp() {
	code := "u:" + w.key(UniqueRows)
	w.operation(UniqueRows, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step(code, "")
			res, err := func() (sqlonce.Result, error) {
				rows, err := w.n.db.Tx(tx).OrderInsertIfAbsent(ctx, code, "a"+strconv.FormatInt(a.ID, 10), a.ID)
				if err != nil {
					return sqlonce.Result{}, err
				}
				if err := f.inFn(ctx, tx); err != nil {
					return sqlonce.Result{}, err
				}
				return unique.Inserted(ctx, rows)
			}()
			st.set(res, err, w.r.tick())
			return err
		})
	})
}

// optimisticOp adds 1 to an order's amount from the version it read
// first, retrying with that same version as a client retrying its request
// does. Its key is the order and the version: each version step must be
// taken by exactly one FirstRun.
func (w *worker[TTx]) optimisticOp() {
	i := w.rng.IntN(len(w.r.optIDs))
	id := w.r.optIDs[i]
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	v, err := w.n.db.Pool().OrderGetVersion(ctx, id)
	cancel()
	if err != nil {
		w.r.note("optimistic read failed", 1)
		w.backoff(err)
		return
	}
	key := fmt.Sprintf("opt:%d@%d", i, v)
	w.operation(Optimistic, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step(key, "")
			res, err := func() (sqlonce.Result, error) {
				biz := w.n.db.Tx(tx)
				rows, err := biz.OrderAddAmount(ctx, id, v, 1)
				if err != nil {
					return sqlonce.Result{}, err
				}
				if err := f.inFn(ctx, tx); err != nil {
					return sqlonce.Result{}, err
				}
				return optimistic.Update(ctx, rows, v, func(ctx context.Context) (int64, error) {
					return biz.OrderGetVersion(ctx, id)
				})
			}()
			st.set(res, err, w.r.tick())
			return err
		})
	})
}

// stateMachineOp pays an order (created -> paid).
func (w *worker[TTx]) stateMachineOp() {
	key := w.key(StateMachine)
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	id, err := w.r.smOrder(ctx, key)
	cancel()
	if err != nil {
		w.r.note("order create failed", 1)
		w.backoff(err)
		return
	}
	w.operation(StateMachine, func(a *Attempt) {
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step("sm:"+key, "")
			biz := w.n.db.Tx(tx)
			res, err := w.r.sm.Transition(ctx, "created", "paid",
				func(ctx context.Context) (int64, error) {
					n, err := biz.OrderSetStatus(ctx, id, "created", "paid")
					if err != nil {
						return 0, err
					}
					return n, f.inFn(ctx, tx)
				},
				func(ctx context.Context) (string, error) { return biz.OrderGetStatus(ctx, id) })
			st.set(res, err, w.r.tick())
			return err
		})
	})
}

// leaseOp runs the lease mode: claim in a short transaction, do the
// "external work", then complete in a transaction that also writes the
// ledger row of the key (CompleteTx), so that the completion is the key's
// one business effect. Every lease call runs at the pinned clock.
//
// It reports whether the key ended settled (done, or held by this worker
// and completed) and whether a claim found it still leased.
func (w *worker[TTx]) leaseOp(key string) (settled, inProgress bool) {
	ref := "lease:" + key
	w.r.leases.Store(key, true)
	req := dedupe.Request{Scope: "lease", Key: key, TTL: keyTTL}
	for try := range 20 {
		w.pick()
		a := &Attempt{ID: w.r.ids.Add(1), Worker: w.id, Op: Lease + " claim", Try: try}
		ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
		st := a.step(ref, "claim")
		l, res, err := w.n.store.Claim(testclock.With(ctx, w.r.vclock.Now()), req, w.r.cfg.Lease)
		cancel()
		st.set(res, err, w.r.tick())
		a.Err = err
		if l != nil {
			st.Token = l.Token
		}
		if err == nil && res.FirstRun() && w.faulty() {
			a.Fault = w.r.leaseFaults[w.rng.IntN(len(w.r.leaseFaults))]
		}
		w.r.record(a)
		switch {
		case err == nil && res.AlreadyDone():
			return true, false
		case err == nil:
			return w.holdLease(ref, l, a.Fault), false
		case errors.Is(err, sqlonce.ErrInProgress):
			inProgress = true
			if w.noFaults {
				return false, true
			}
		}
		w.backoff(err)
		if w.r.stop.Load() && !w.noFaults {
			return false, inProgress
		}
	}
	return false, inProgress
}

// holdLease does the external work of a won lease and completes it, unless
// the fault says the holder dies or the work failed. A late holder
// completes around the time its lease lapses, when a claim or a Run may be
// taking it over: fencing must refuse the completion, or the takeover.
func (w *worker[TTx]) holdLease(ref string, l *dedupe.Lease, fault Fault) bool {
	w.r.note("lease external calls", 1)
	switch fault {
	case FaultAbandon:
		return false
	case FaultRelease:
		w.release(ref, l)
		return false
	case FaultLate:
		// Between half and twice the lease, in real time.
		span := w.r.cfg.Lease / time.Duration(w.r.cfg.ClockSpeed)
		time.Sleep(span/2 + time.Duration(w.rng.Int64N(int64(3*span/2))))
		fault = NoFault
	}
	for try := range 4 {
		a := w.newAttempt(Lease+" complete", try)
		a.Fault = NoFault
		if try == 0 {
			a.Fault = fault
		}
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			ctx = testclock.With(ctx, w.r.vclock.Now())
			st := a.step(ref, "complete")
			st.Token = l.Token
			err := func() error {
				if err := w.n.db.Tx(tx).LedgerInsert(ctx, ref, a.ID); err != nil {
					return err
				}
				if err := f.inFn(ctx, tx); err != nil {
					return err
				}
				resp := []byte(fmt.Sprintf("%s by a%d token %d", ref, a.ID, l.Token))
				if err := w.n.store.CompleteTx(ctx, tx, l, resp); err != nil {
					return err
				}
				st.Response = resp
				return nil
			}()
			res := sqlonce.Result{}
			if err == nil {
				res = sqlonce.Result{Outcome: sqlonce.FirstRun, Response: st.Response}
			}
			st.set(res, err, w.r.tick())
			return err
		})
		if a.beginFailed() {
			w.r.note("begin failed", 1)
		} else {
			w.r.record(a)
		}
		switch {
		case a.Err == nil && a.Commit == Committed:
			return true
		case errors.Is(a.Err, sqlonce.ErrLeaseLost):
			// Someone took the lapsed lease over, or an earlier attempt
			// whose commit was unknown did complete it.
			return false
		}
		w.backoff(a.Err)
	}
	// Could not complete: let the next claimer run the work.
	w.release(ref, l)
	return false
}

func (w *worker[TTx]) release(ref string, l *dedupe.Lease) {
	a := &Attempt{ID: w.r.ids.Add(1), Worker: w.id, Op: Lease + " release"}
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	defer cancel()
	st := a.step(ref, "release")
	st.Token = l.Token
	err := w.n.store.Release(testclock.With(ctx, w.r.vclock.Now()), l)
	st.set(sqlonce.Result{}, err, w.r.tick())
	a.Err = err
	w.r.record(a)
}

// recoverLeases settles every lease key after the run: with the pinned
// clock moved past every lease granted, a claim must find each key either
// done or free to take over, never still held.
func (r *run[TTx]) recoverLeases(rep *Report, vEnd time.Time) {
	r.vclock.Advance(vEnd.Add(2*r.cfg.Lease + time.Second))
	w := newWorker(r, -1, newRand(r.cfg.Seed, 1<<20))
	w.noFaults = true
	r.leases.Range(func(k, _ any) bool {
		key := k.(string)
		for range 5 {
			settled, inProgress := w.leaseOp(key)
			if settled {
				return true
			}
			if inProgress {
				rep.violate("stuck", "lease:"+key, "still leased after every lease lapsed (pinned clock %s)", r.vclock.Now().Format(time.RFC3339Nano))
				return true
			}
		}
		rep.violate("stuck", "lease:"+key, "could not be settled after the run")
		return true
	})
}
