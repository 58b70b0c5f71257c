package checker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

// LeaseDeadline is the workload of callers arriving right when a lease
// lapses, by the database's own clock (never the pinned one): a holder
// claims a fresh key with a short lease and dies, and racers released at
// the lease's deadline, a little before and after it, call DoResponse,
// Store.Run, and Claim followed by CompleteTx on the key. One of them may
// take the lapsed lease over and do the work; every other must be told
// ErrInProgress (still held) or, once the taker committed, AlreadyDone
// with its response. An AlreadyDone for work nobody did (a lost request),
// or before the taker committed, is a violation. Its keys are "ld:N".
const LeaseDeadline = "dedupe lease deadline"

const (
	// ldLease is the holder's lease, in the database's clock.
	ldLease = 15 * time.Millisecond
	// ldRacers call on the key at its deadline.
	ldRacers = 6
	// ldSpread is how far around the deadline the racers arrive.
	ldSpread = time.Millisecond
)

// ldRacer kinds.
const (
	ldDoResponse = iota
	ldRun
	ldClaim
)

// leaseDeadlineOp runs one key of the workload: the holder's claim, then
// the racers, and waits for them.
func (w *worker[TTx]) leaseDeadlineOp() {
	key := strconv.FormatInt(w.r.ldKeys.Add(1), 10)
	ref := "ld:" + key
	req := dedupe.Request{Scope: "ld", Key: key, TTL: keyTTL}

	a := &Attempt{ID: w.r.ids.Add(1), Worker: w.id, Op: LeaseDeadline + " holder", Fault: FaultAbandon}
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	before := time.Now()
	st := a.step(ref, "claim")
	l, res, err := w.n.store.Claim(ctx, req, ldLease)
	cancel()
	st.set(res, err, w.r.tick())
	a.Err = err
	if l != nil {
		st.Token = l.Token
	}
	w.r.record(a)
	if err != nil || !res.FirstRun() {
		return
	}
	// The lease began no earlier than before: its deadline is about
	// before+ldLease on this machine's clock, which the database shares.
	deadline := before.Add(ldLease)
	var wg sync.WaitGroup
	for i := range ldRacers {
		at := deadline.Add(time.Duration(w.rng.Int64N(int64(2*ldSpread))) - ldSpread)
		rw := newWorker(w.r, w.id+i, newRand(w.r.cfg.Seed, uint64(1<<32+w.r.ids.Load()*ldRacers+int64(i))))
		rw.noFaults = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(at))
			rw.ldRace(i%3, req, ref)
		}()
	}
	wg.Wait()
	w.r.note("lease deadline races", 1)
}

// ldRace is one racer's single attempt: a client that is told "in
// progress" would come back later; the point here is what it was told at
// the deadline.
func (w *worker[TTx]) ldRace(kind int, req dedupe.Request, ref string) {
	switch kind {
	case ldDoResponse:
		a := w.newAttempt(LeaseDeadline+" DoResponse", 0)
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			return w.dedupeStep(ctx, tx, a, f, req.Scope, req.Key, true, nil)
		})
		w.r.record(a)
	case ldRun:
		a := w.newAttemptOf(LeaseDeadline+" Run", 0, nil)
		w.runAttempt(a, DedupeCall{Scope: req.Scope, Key: req.Key, Ref: ref, Respond: true}, false)
		w.r.record(a)
	case ldClaim:
		a := &Attempt{ID: w.r.ids.Add(1), Worker: w.id, Op: LeaseDeadline + " claim"}
		ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
		st := a.step(ref, "claim")
		l, res, err := w.n.store.Claim(ctx, req, time.Minute)
		cancel()
		st.set(res, err, w.r.tick())
		a.Err = err
		if l != nil {
			st.Token = l.Token
		}
		w.r.record(a)
		if err == nil && res.FirstRun() {
			w.ldComplete(ref, l)
		}
	}
}

// ldComplete completes a lease a racer took over, with the key's ledger
// row in the same transaction, retrying as the lease workload does.
func (w *worker[TTx]) ldComplete(ref string, l *dedupe.Lease) {
	for try := range 4 {
		a := w.newAttempt(LeaseDeadline+" complete", try)
		w.inTx(a, func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error {
			st := a.step(ref, "complete")
			st.Token = l.Token
			resp := []byte(fmt.Sprintf("%s by a%d token %d", ref, a.ID, l.Token))
			err := w.r.db.Tx(tx).LedgerInsert(ctx, ref, a.ID)
			if err == nil {
				err = w.n.store.CompleteTx(ctx, tx, l, resp)
			}
			res := sqlonce.Result{}
			if err == nil {
				res = sqlonce.Result{Outcome: sqlonce.FirstRun, Response: resp}
			}
			st.set(res, err, w.r.tick())
			return err
		})
		w.r.record(a)
		if a.Err == nil && a.Commit == Committed || errors.Is(a.Err, sqlonce.ErrLeaseLost) {
			return
		}
		w.backoff(a.Err)
	}
}

// checkLeaseDeadline checks an "ld:" key. The holder's and the racers'
// claims won are not writers: the completion of a racer's claim is, as a
// DoResponse's or a Run's FirstRun is. A claim told AlreadyDone observes
// the effect as a DoResponse or a Run told AlreadyDone does.
func (v *verifier) checkLeaseDeadline(key string, steps []*Step, s *dbState) {
	var mapped []*Step
	for _, st := range steps {
		switch {
		case st.Kind == "claim" && st.Outcome == sqlonce.AlreadyDone,
			st.Kind == "complete":
			c := *st
			c.Kind = ""
			mapped = append(mapped, &c)
		case st.Kind == "claim":
		default:
			mapped = append(mapped, st)
		}
	}
	ledger := s.ledger[key]
	marker, hasMarker := s.keys[key]
	done := hasMarker && marker.state == stateDone
	tr := truth{effects: len(ledger), named: true, writers: ledger}
	if done {
		tr.checkResponse, tr.response = true, marker.response
	}
	v.check(key, mapped, tr)
	// A holder whose claim failed (its connection lost while the server
	// was killed) may have left no row: only a claim that answered must
	// have.
	claimed := false
	for _, st := range steps {
		if st.Kind == "claim" && st.Outcome == sqlonce.FirstRun && st.Err == nil {
			claimed = true
		}
	}
	switch {
	case !hasMarker && claimed:
		v.rep.violate(VMarker, key, "claimed, but no key row")
	case done != (len(ledger) > 0):
		v.rep.violate(VMarker, key, "key row in state %d with %d ledger rows: the work and its key did not commit together", marker.state, len(ledger))
	}
	if done {
		v.rep.ldTakeovers++
	}
	v.rep.ldKeys++
}
