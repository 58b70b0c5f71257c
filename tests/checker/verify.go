package checker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce"
)

// Violation kinds.
const (
	VDuplicate = "duplicate" // more than one effect for a key
	VLost      = "lost"      // a committed FirstRun (or an AlreadyDone) without its effect
	VPhantom   = "phantom"   // an effect no FirstRun that committed accounts for
	VEarly     = "early"     // AlreadyDone reported before any writer began to commit
	VReplay    = "replay"    // a replayed or recorded response that is not the writer's
	VMarker    = "marker"    // the dedupe marker and the effect disagree
	VFencing   = "fencing"   // a lease completed with a token that was no longer current
	VStuck     = "stuck"     // a key still held after every lease lapsed
	VError     = "error"     // an error no fault explains
)

// truth is what the database says about one key.
type truth struct {
	effects int
	// named: each effect names the attempt that wrote it (writers).
	named   bool
	writers []int64
	// writerKind and doneKind select the steps that claim the effect
	// (FirstRun) and that observe it (AlreadyDone).
	writerKind, doneKind string
	// checkResponse: replays must equal response, the recorded one.
	checkResponse bool
	response      []byte
}

type verifier struct {
	rep      *Report
	attempts map[int64]*Attempt
	timeout  time.Duration // Config.AttemptTimeout
}

func (r *run[TTx]) verify(rep *Report, s *dbState, vEnd time.Time) {
	v := &verifier{rep: rep, attempts: map[int64]*Attempt{}, timeout: r.cfg.AttemptTimeout}
	byKey := map[string][]*Step{}
	for _, a := range rep.Attempts {
		v.attempts[a.ID] = a
		for _, st := range a.Steps {
			byKey[st.Key] = append(byKey[st.Key], st)
		}
		v.checkError(a)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		steps := byKey[key]
		family, _, _ := strings.Cut(key, ":")
		switch family {
		case "do", "resp", "run":
			v.checkDedupe(key, steps, s)
		case "u":
			v.checkUnique(key, steps, s)
		case "sm":
			v.checkStateMachine(key, steps, s)
		case "opt":
			v.checkOptimistic(key, steps, s)
		case "ld":
			v.checkLeaseDeadline(key, steps, s)
		case "lease":
			v.checkLease(key, steps, s, r.cfg.Lease, vEnd)
		default:
			rep.violate(VError, key, "step on a key of no known workload")
		}
	}
	// A version step nobody reported as FirstRun is an update from nowhere.
	for i := range r.optIDs {
		o := s.orders[fmt.Sprintf("opt:%d", i)]
		if o.amount != o.version-1 {
			rep.violate(VPhantom, fmt.Sprintf("opt:%d", i), "amount %d after %d version steps", o.amount, o.version-1)
		}
		for ver := int64(1); ver < o.version; ver++ {
			if _, ok := byKey[fmt.Sprintf("opt:%d@%d", i, ver)]; !ok {
				rep.violate(VPhantom, fmt.Sprintf("opt:%d@%d", i, ver), "the version moved on from %d, but no attempt updated from it", ver)
			}
		}
	}
	v.checkNet(s)
	// Unknown commits, resolved by the database where it names writers.
	for _, a := range rep.Attempts {
		if a.Commit != Unknown {
			continue
		}
		for _, st := range a.Steps {
			if st.Outcome != sqlonce.FirstRun || st.Kind == "claim" || !named(st.Key) {
				continue
			}
			rep.unknownNamed++
			if v.wrote(s, st) {
				rep.unknownCommitted++
				if a.Run {
					rep.run.UnknownCommitted++
				}
			}
			break
		}
	}
}

// named reports whether the effects of key name their writer.
func named(key string) bool {
	family, _, _ := strings.Cut(key, ":")
	return family == "do" || family == "resp" || family == "run" || family == "u" || family == "lease" || family == "ld"
}

// wrote reports whether the database names st's attempt as the writer of
// st's key.
func (v *verifier) wrote(s *dbState, st *Step) bool {
	if strings.HasPrefix(st.Key, "u:") {
		return s.orders[st.Key].customer == "a"+strconv.FormatInt(st.a.ID, 10)
	}
	return slices.Contains(s.ledger[st.Key], st.a.ID)
}

// check applies the invariants every workload shares, and returns the steps
// that may have written the key's effect. A Run step (KindRun) is a writer
// on FirstRun and an observer on AlreadyDone, on any key.
func (v *verifier) check(key string, steps []*Step, tr truth) []*Step {
	var cands, known, dones []*Step
	for _, st := range steps {
		switch {
		case (st.Kind == tr.writerKind || st.Kind == KindRun) && st.Outcome == sqlonce.FirstRun:
			switch st.a.Commit {
			case Committed:
				known = append(known, st)
				cands = append(cands, st)
			case Unknown:
				cands = append(cands, st)
			}
		case (st.Kind == tr.doneKind || st.Kind == KindRun) && st.Outcome == sqlonce.AlreadyDone:
			dones = append(dones, st)
		}
	}
	if tr.effects > 1 {
		v.rep.violate(VDuplicate, key, "%d effects in the database (writers %v); FirstRuns committed: %s, maybe committed: %d",
			tr.effects, tr.writers, ids(known), len(cands)-len(known))
	}
	writers := cands
	if tr.named {
		writers = nil
		for _, id := range tr.writers {
			i := slices.IndexFunc(cands, func(st *Step) bool { return st.a.ID == id })
			if i < 0 {
				v.rep.violate(VPhantom, key, "effect written by attempt %d, which %s", id, v.describe(id, key))
				continue
			}
			writers = append(writers, cands[i])
		}
		for _, st := range known {
			if !slices.Contains(tr.writers, st.a.ID) {
				v.rep.violate(VLost, key, "attempt %d reported FirstRun and committed, but the database names writers %v", st.a.ID, tr.writers)
			}
		}
	} else {
		if tr.effects > 0 && len(cands) == 0 {
			v.rep.violate(VPhantom, key, "effect in the database, but no attempt reported FirstRun and committed")
		}
		if len(known) > tr.effects {
			kind := VDuplicate
			if tr.effects == 0 {
				kind = VLost
			}
			v.rep.violate(kind, key, "FirstRun committed by attempts %s, %d effect(s) in the database", ids(known), tr.effects)
		}
	}
	for _, d := range dones {
		if tr.effects == 0 {
			v.rep.violate(VLost, key, "attempt %d was told AlreadyDone, but no effect is in the database", d.a.ID)
			continue
		}
		if !slices.ContainsFunc(writers, func(w *Step) bool { return w.a.CommitStart < d.At }) {
			v.rep.violate(VEarly, key, "attempt %d was told AlreadyDone at t=%d, before any writer began to commit (writers %s at %s)",
				d.a.ID, d.At, ids(writers), commitStarts(writers))
		}
		if tr.checkResponse && !sameResponse(d.Response, tr.response) {
			v.rep.violate(VReplay, key, "attempt %d was replayed %q, the key records %q", d.a.ID, d.Response, tr.response)
		}
	}
	if tr.checkResponse && tr.named && tr.effects == 1 && len(writers) == 1 && !sameResponse(writers[0].Response, tr.response) {
		v.rep.violate(VReplay, key, "the key records %q, its writer (attempt %d) was given %q", tr.response, writers[0].a.ID, writers[0].Response)
	}
	return writers
}

func (v *verifier) checkDedupe(key string, steps []*Step, s *dbState) {
	ledger := s.ledger[key]
	marker, hasMarker := s.keys[key]
	v.check(key, steps, truth{
		effects: len(ledger), named: true, writers: ledger,
		checkResponse: true, response: marker.response,
	})
	switch {
	case hasMarker && len(ledger) == 0:
		v.rep.violate(VMarker, key, "marker without effect: every repeat is told AlreadyDone for work never done")
	case !hasMarker && len(ledger) > 0:
		v.rep.violate(VMarker, key, "effect without marker: the next call runs the work again")
	case hasMarker && marker.state != stateDone:
		v.rep.violate(VMarker, key, "marker in state %d, not done", marker.state)
	}
}

func (v *verifier) checkUnique(key string, steps []*Step, s *dbState) {
	tr := truth{named: true}
	if o, ok := s.orders[key]; ok {
		tr.effects = 1
		id, err := strconv.ParseInt(strings.TrimPrefix(o.customer, "a"), 10, 64)
		if err != nil {
			v.rep.violate(VPhantom, key, "order with customer %q was not written by an attempt", o.customer)
			return
		}
		tr.writers = []int64{id}
	}
	v.check(key, steps, tr)
}

func (v *verifier) checkStateMachine(key string, steps []*Step, s *dbState) {
	tr := truth{}
	switch o := s.orders[key]; o.status {
	case "paid":
		tr.effects = 1
	case "created":
	default:
		v.rep.violate(VPhantom, key, "order in status %q", o.status)
		return
	}
	v.check(key, steps, tr)
}

func (v *verifier) checkOptimistic(key string, steps []*Step, s *dbState) {
	code, ver, _ := strings.Cut(key, "@")
	from, err := strconv.ParseInt(ver, 10, 64)
	if err != nil {
		v.rep.violate(VError, key, "bad key")
		return
	}
	tr := truth{}
	if from < s.orders[code].version {
		tr.effects = 1
	}
	v.check(key, steps, tr)
}

func (v *verifier) checkLease(key string, steps []*Step, s *dbState, lease time.Duration, vEnd time.Time) {
	ledger := s.ledger[key]
	marker, hasMarker := s.keys[key]
	done := hasMarker && marker.state == stateDone
	tr := truth{
		effects: len(ledger), named: true, writers: ledger,
		writerKind: "complete", doneKind: "claim",
	}
	if done {
		tr.checkResponse, tr.response = true, marker.response
	}
	writers := v.check(key, steps, tr)
	switch {
	case !hasMarker:
		v.rep.violate(VMarker, key, "claimed, but no key row")
	case done != (len(ledger) > 0):
		v.rep.violate(VMarker, key, "key row in state %d with %d ledger rows: completion and its write did not commit together", marker.state, len(ledger))
	case marker.state == stateLeased:
		v.rep.violate(VStuck, key, "still leased (until %v) when the run ended", marker.lockedUntil.Time)
	}
	if marker.state == stateLeased && marker.lockedUntil.Valid && marker.lockedUntil.Time.After(vEnd.Add(lease)) {
		v.rep.violate(VStuck, key, "leased until %v, longer than any lease granted by %v", marker.lockedUntil.Time, vEnd.Add(lease))
	}
	// Fencing: tokens grow with every claim won, and only the newest one
	// can complete.
	var won []int64
	for _, st := range steps {
		if st.Kind == "claim" && st.Err == nil && st.Outcome == sqlonce.FirstRun {
			if slices.Contains(won, st.Token) {
				v.rep.violate(VFencing, key, "token %d won twice", st.Token)
			}
			won = append(won, st.Token)
		}
	}
	v.rep.leaseClaims += len(won)
	v.rep.leaseTakeovers += max(len(won)-1, 0)
	if len(writers) == 1 && writers[0].Kind == KindRun && len(won) > 0 {
		v.rep.run.LeaseTakeovers++
		for _, st := range steps {
			if st.Kind == "complete" && errors.Is(st.Err, sqlonce.ErrLeaseLost) {
				v.rep.run.FencedCompletions++
			}
		}
	}
	// A Run that took the key over holds no lease: what fences it is that
	// the completion of the lease it took over must fail (else two effects)
	// and that no claim wins once it recorded the key (else the key is
	// leased again, or two effects).
	if len(writers) == 1 && done && writers[0].Kind != KindRun {
		w := writers[0]
		if w.Token != marker.token {
			v.rep.violate(VFencing, key, "completed by attempt %d with token %d, the key records token %d", w.a.ID, w.Token, marker.token)
		}
		for _, t := range won {
			if t > w.Token {
				v.rep.violate(VFencing, key, "completed with token %d although a claim won token %d", w.Token, t)
			}
		}
	}
}

// describe says what attempt id did about key, for a phantom effect.
func (v *verifier) describe(id int64, key string) string {
	a, ok := v.attempts[id]
	if !ok {
		return "is not in the log"
	}
	for _, st := range a.Steps {
		if st.Key == key {
			return fmt.Sprintf("reported %v (err %v), %v (fault %q, err %v)", st.Outcome, st.Err, a.Commit, a.Fault, a.Err)
		}
	}
	return fmt.Sprintf("never touched the key (%s, %v)", a.Op, a.Commit)
}

// checkError flags errors that no injected fault or concurrency explains.
func (v *verifier) checkError(a *Attempt) {
	err := a.Err
	if err == nil {
		return
	}
	lease := strings.HasPrefix(a.Op, Lease)
	key := ""
	if len(a.Steps) > 0 {
		key = a.Steps[0].Key
	}
	// Run finds a lease key held as a claim does; a Store that must not
	// wait finds any key held.
	leaseHeld := lease || a.Run && strings.HasPrefix(key, "lease:") || a.NoWait
	switch {
	case errors.Is(err, sqlonce.ErrKeyReuse), errors.Is(err, sqlonce.ErrInvalidTransition),
		errors.Is(err, sqlonce.ErrTooManyRows), errors.Is(err, sqlonce.ErrNotFound),
		errors.Is(err, sqlonce.ErrInvalidArgument), errors.Is(err, sqlonce.ErrInvalidKey),
		errors.Is(err, sqlonce.ErrResponseTooLarge):
		v.rep.violate(VError, key, "attempt %d (%s): %v", a.ID, a.Op, err)
	case !lease && errors.Is(err, sqlonce.ErrLeaseLost), !leaseHeld && errors.Is(err, sqlonce.ErrInProgress):
		v.rep.violate(VError, key, "attempt %d (%s): %v", a.ID, a.Op, err)
	case serverSaysRetry(err) && !sqlonce.IsRetryable(err):
		v.rep.violate(VError, key, "attempt %d (%s): the server asks for a retry, sqlonce.IsRetryable says no: %v", a.ID, a.Op, err)
	case errors.Is(err, context.DeadlineExceeded):
		v.rep.violate(VError, key, "attempt %d (%s) ran out of time (%v): %v", a.ID, a.Op, v.timeout, err)
	}
}

func sameResponse(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

func ids(steps []*Step) string {
	s := make([]string, len(steps))
	for i, st := range steps {
		s[i] = strconv.FormatInt(st.a.ID, 10)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func commitStarts(steps []*Step) string {
	s := make([]string, len(steps))
	for i, st := range steps {
		s[i] = "t=" + strconv.FormatInt(st.a.CommitStart, 10)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// serverSaysRetry reports a serialization failure or deadlock by its code.
func serverSaysRetry(err error) bool {
	var pgErr *pgconn.PgError
	var myErr *mysql.MySQLError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01") ||
		errors.As(err, &myErr) && myErr.Number == 1213
}
