package checker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// Steps is dedupe.Store.RunSteps: a payment of four steps (reserve and
// order in the database, charge and email outside it) on keys of its own,
// runs stopped at random at the start of or inside a step (a cancelled
// context, a panic, a step's error, a cut connection), resumed by the
// workers' retries and by a resumer running beside them. After the
// run every key is settled; each database step's ledger row must be
// there once, each outside step must have reached the outside service
// with one idempotency key, and every answer of a key must be the same.
const Steps = "dedupe.Store.RunSteps"

// stepsState is the Steps workload's outside service and what the run's
// calls answered.
type stepsState struct {
	mu sync.Mutex
	// outside maps "key/step" to the idempotency keys the outside service
	// got for it, with the calls of each.
	outside map[string]map[string]int
	calls   atomic.Int64
	answers map[string]string // key -> the response every call must give
	used    map[string]bool
	stops   map[string]int // stops by mode
	results map[string]int // operations by outcome or error class
}

func newStepsState() *stepsState {
	return &stepsState{outside: map[string]map[string]int{}, answers: map[string]string{}, used: map[string]bool{}, stops: map[string]int{}, results: map[string]int{}}
}

// call is the outside service: it dedupes by the idempotency key, as a
// payment provider does, and answers the same for a repeat.
func (s *stepsState) call(key, step, idem string) []byte {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.outside[key+"/"+step]
	if m == nil {
		m = map[string]int{}
		s.outside[key+"/"+step] = m
	}
	m[idem]++
	return []byte(step + "_" + idem[:12])
}

func (s *stepsState) count(m map[string]int, what string) {
	s.mu.Lock()
	m[what]++
	s.mu.Unlock()
}

// stepStop is a stop armed for one run of the operation.
type stepStop struct {
	step   string
	inside bool
	mode   string // "cancel", "panic", "error", "kill"
	cancel context.CancelFunc
}

type stepStopKey struct{}

var errStepStop = errors.New("checker: step stopped")

func (w *worker[TTx]) stepsOperation() *dedupe.Operation[TTx] {
	st := w.r.steps
	stop := func(ctx context.Context, tx *TTx, step string, inside bool) error {
		s, _ := ctx.Value(stepStopKey{}).(*stepStop)
		if s == nil || s.step != step || s.inside != inside {
			return nil
		}
		switch s.mode {
		case "panic":
			panic(errStepStop)
		case "cancel":
			s.cancel()
			return ctx.Err()
		case "kill":
			if tx != nil {
				if id, err := w.n.db.ConnID(context.Background(), *tx); err == nil {
					w.kill(id)
					return nil // the next statement finds the connection cut
				}
			}
		}
		return errStepStop
	}
	inTx := func(name string) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, InTx: func(ctx context.Context, tx TTx, s dedupe.StepState) ([]byte, error) {
			if err := stop(ctx, &tx, name, false); err != nil {
				return nil, err
			}
			if err := w.n.db.Tx(tx).LedgerInsert(ctx, "stp:"+string(s.Input)+"/"+name, 1); err != nil {
				return nil, err
			}
			if err := stop(ctx, &tx, name, true); err != nil {
				return nil, err
			}
			charge, _ := s.Result("charge")
			return fmt.Appendf(nil, "%s:%s", name, charge), nil
		}}
	}
	outside := func(name string) dedupe.Step[TTx] {
		return dedupe.Step[TTx]{Name: name, Outside: func(ctx context.Context, s dedupe.StepState) ([]byte, error) {
			if err := stop(ctx, nil, name, false); err != nil {
				return nil, err
			}
			b := st.call(string(s.Input), name, s.Key)
			if err := stop(ctx, nil, name, true); err != nil {
				return nil, err
			}
			order, _ := s.Result("order")
			return append(b, order...), nil
		}}
	}
	return &dedupe.Operation[TTx]{Name: "checker-payment", Lease: w.r.cfg.Lease, Steps: []dedupe.Step[TTx]{
		inTx("reserve"), outside("charge"), inTx("order"), outside("email"),
	}}
}

var stepNames = []string{"reserve", "charge", "order", "email"}

func (w *worker[TTx]) stepsOp() {
	key := "s" + w.key(Steps)
	st := w.r.steps
	st.mu.Lock()
	st.used[key] = true
	st.mu.Unlock()
	ctx, cancel := context.WithTimeout(testclock.With(w.r.ctx, w.r.vclock.Now()), w.r.cfg.AttemptTimeout)
	defer cancel()
	if !w.noFaults && w.faulty() {
		s := &stepStop{step: stepNames[w.rng.IntN(len(stepNames))], inside: w.rng.IntN(2) == 0, cancel: cancel}
		modes := []string{"cancel", "panic", "error"}
		if (s.step == "reserve" || s.step == "order") && w.r.db.Dialect() != "sqlite" {
			modes = append(modes, "kill")
		}
		s.mode = modes[w.rng.IntN(len(modes))]
		st.count(st.stops, s.mode)
		ctx = context.WithValue(ctx, stepStopKey{}, s)
	}
	w.pick()
	res, err := w.runSteps(ctx, key)
	w.stepsResult(key, res, err)
}

// runSteps runs the operation for key, a panic turned into errStepStop.
func (w *worker[TTx]) runSteps(ctx context.Context, key string) (res sqlonce.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p != errStepStop {
				panic(p)
			}
			err = errStepStop
		}
	}()
	req := dedupe.Request{Scope: "steps", Key: key, Fingerprint: []byte(key)}
	return w.n.store.RunSteps(ctx, req, []byte(key), w.stepsOperation())
}

func (w *worker[TTx]) stepsResult(key string, res sqlonce.Result, err error) {
	st := w.r.steps
	switch {
	case err == nil:
		st.count(st.results, res.Outcome.String())
		st.mu.Lock()
		defer st.mu.Unlock()
		if prev, ok := st.answers[key]; !ok {
			st.answers[key] = string(res.Response)
		} else if prev != string(res.Response) {
			w.r.stepsViolations = append(w.r.stepsViolations, Violation{Kind: VReplay, Key: "steps:" + key, Detail: fmt.Sprintf("answered %q, earlier %q", res.Response, prev)})
		}
	case errors.Is(err, sqlonce.ErrKeyReuse), errors.Is(err, dedupe.ErrOperationFailed), errors.Is(err, sqlonce.ErrInvalidArgument):
		st.count(st.results, "error "+errClass(err))
		st.mu.Lock()
		w.r.stepsViolations = append(w.r.stepsViolations, Violation{Kind: VError, Key: "steps:" + key, Detail: err.Error()})
		st.mu.Unlock()
	default:
		// A stop, a lease held or lost, a cut connection: the key is
		// settled after the run.
		st.count(st.results, "error "+errClass(err))
	}
}

// resumeSteps runs the resumer beside the workers until the run stops.
func (r *run[TTx]) resumeSteps(done <-chan struct{}) {
	w := newWorker(r, -2, newRand(r.cfg.Seed, 1<<21))
	w.noFaults = true
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		w.pick()
		n, _, _ := w.n.store.ResumeStuck(testclock.With(r.ctx, r.vclock.Now()), 1000, w.stepsOperation())
		r.steps.mu.Lock()
		r.steps.results["resumer finished"] += n
		r.steps.mu.Unlock()
	}
}

// settleSteps finishes every key of the Steps workload, past every lease,
// and checks the effects and the answers.
func (r *run[TTx]) settleSteps(rep *Report, vEnd time.Time) {
	st := r.steps
	w := newWorker(r, -3, newRand(r.cfg.Seed, 1<<22))
	w.noFaults = true
	keys := make([]string, 0, len(st.used))
	for k := range st.used {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	at := vEnd.Add(2*r.cfg.Lease + time.Second)
	for _, key := range keys {
		var err error
		for range 5 {
			w.pick()
			var res sqlonce.Result
			res, err = w.runSteps(testclock.With(r.ctx, at), key)
			if err == nil {
				w.stepsResult(key, res, nil)
				break
			}
			at = at.Add(2 * r.cfg.Lease)
		}
		if err != nil {
			rep.violate(VStuck, "steps:"+key, "could not be settled after the run: %v", err)
			continue
		}
		for _, step := range []string{"reserve", "order"} {
			n, err := r.db.Pool().LedgerCountByRef(r.ctx, "stp:"+key+"/"+step)
			switch {
			case err != nil:
				rep.violate(VError, "steps:"+key, "count ledger: %v", err)
			case n > 1:
				rep.violate(VDuplicate, "steps:"+key, "step %s wrote %d ledger rows", step, n)
			case n == 0:
				rep.violate(VLost, "steps:"+key, "step %s wrote no ledger row", step)
			}
		}
		for _, step := range []string{"charge", "email"} {
			if idems := st.outside[key+"/"+step]; len(idems) != 1 {
				rep.violate(VDuplicate, "steps:"+key, "step %s reached the outside service with %d idempotency keys", step, len(idems))
			}
		}
	}
	for _, v := range r.stepsViolations {
		rep.violate(v.Kind, v.Key, "%s", v.Detail)
	}
	var outs []string
	for _, k := range slices.Sorted(maps.Keys(st.results)) {
		outs = append(outs, fmt.Sprintf("%s %d", k, st.results[k]))
	}
	var stops []string
	for _, k := range slices.Sorted(maps.Keys(st.stops)) {
		stops = append(stops, fmt.Sprintf("%s %d", k, st.stops[k]))
	}
	r.logf("steps: %d keys settled; runs stopped: %s; outcomes: %s; outside service: %d calls for %d step keys",
		len(keys), strings.Join(stops, ", "), strings.Join(outs, ", "), st.calls.Load(), 2*len(keys))
}
