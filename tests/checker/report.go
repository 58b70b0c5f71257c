package checker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce"
)

// Violation is one broken invariant.
type Violation struct {
	Kind   string // VDuplicate, VLost, ...
	Key    string
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Kind, v.Key, v.Detail) }

// Report is the outcome of a run.
type Report struct {
	Dialect    string
	Config     string
	Elapsed    time.Duration
	Attempts   []*Attempt
	Violations []Violation

	mu                sync.Mutex
	notes             map[string]int
	unknownNamed      int
	unknownCommitted  int
	leaseClaims       int
	leaseTakeovers    int
	commitUnknownErrs int      // Run errors at a cut COMMIT matching sqlonce.ErrCommitUnknown
	netLines          []string // per network fault: fired, unknown, committed
	ldKeys            int      // keys of the LeaseDeadline workload checked
	ldTakeovers       int      // of which a racer took the lapsed lease over and did the work
	run               RunCounts
	lines             []string
}

// RunCounts sums up the attempts of the StoreRun workload.
type RunCounts struct {
	Attempts    int
	FirstRun    int // answered FirstRun
	AlreadyDone int // answered AlreadyDone
	// FailedRolledBack and FailedUnknown count the attempts whose fn
	// completed and which then failed, by how their commit ended: provably
	// rolled back, or unknown (the database decides; UnknownCommitted of
	// them committed).
	FailedRolledBack, FailedUnknown, UnknownCommitted int
	// Errors counts the attempts that failed, by errClass.
	Errors map[string]int
	// Calls counts the calls of fn; Repeated, the attempts that called it
	// more than once; MaxCalls, the most calls in one attempt.
	Calls, Repeated, MaxCalls int
	// LeaseTakeovers counts the lease keys whose effect a Run wrote after
	// a claim had won the key; FencedCompletions, the completions refused
	// (ErrLeaseLost) on those keys.
	LeaseTakeovers, FencedCompletions int
	// Faults counts the attempts by the fault injected.
	Faults map[Fault]int
}

// UnknownCommitted returns how many attempts whose commit was unknown to
// them the database names as the writer of their effect.
func (r *Report) UnknownCommitted() int { return r.unknownCommitted }

// Run returns the counts of the StoreRun workload.
func (r *Report) Run() RunCounts { return r.run }

func (r *Report) violate(kind, key, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Violations = append(r.Violations, Violation{Kind: kind, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// Count returns the number of violations of kind.
func (r *Report) Count(kind string) int { return len(r.Of(kind)) }

// Of returns the violations of kind.
func (r *Report) Of(kind string) []Violation {
	var vs []Violation
	for _, v := range r.Violations {
		if v.Kind == kind {
			vs = append(vs, v)
		}
	}
	return vs
}

// Summary is the report as text: operations by workload and outcome,
// faults by kind, errors and retries, unknown commits, violations.
func (r *Report) Summary() string { return strings.Join(r.lines, "\n") }

// Log writes the summary and up to max violations to t.
func (r *Report) Log(logf func(format string, args ...any), max int) {
	logf("%s", r.Summary())
	for i, v := range r.Violations {
		if i == max {
			logf("... and %d more violations", len(r.Violations)-max)
			break
		}
		logf("VIOLATION %s", v)
		for _, line := range r.touching(v.Key) {
			logf("    %s", line)
		}
	}
}

// touching describes the attempts that had a step on key, in the order
// they were recorded: what each reported for the key, and how it ended.
func (r *Report) touching(key string) []string {
	var lines []string
	for _, a := range r.Attempts {
		for _, st := range a.Steps {
			if st.Key != key {
				continue
			}
			lines = append(lines, fmt.Sprintf("attempt %d (%s, try %d, worker %d on node %d, %s, fault %q): %s %v at t=%d (err %v); commit %v at t=%d..%d (err %v), fn called %d times",
				a.ID, a.Op, a.Try, a.Worker, a.Node, a.Iso, a.Fault, st.Kind, st.Outcome, st.At, st.Err, a.Commit, a.CommitStart, a.CommitEnd, a.Err, a.Calls))
		}
	}
	return lines
}

type outcomeCounts struct {
	first    [4]int // by CommitState
	done     int
	errs     int
	attempts int
}

func (r *Report) summarize() {
	ops := map[string]*outcomeCounts{}
	faults := map[Fault]int{}
	errs := map[string]int{}
	retries, retryable := 0, 0
	commits := map[CommitState]int{}
	rc := &r.run
	rc.Errors, rc.Faults = map[string]int{}, map[Fault]int{}
	for _, a := range r.Attempts {
		if a.Run {
			rc.count(a)
		}
		name := a.Op
		c := ops[name]
		if c == nil {
			c = &outcomeCounts{}
			ops[name] = c
		}
		c.attempts++
		if a.Try > 0 {
			retries++
		}
		if a.Fault != NoFault && (a.Op != Lease+" claim" || a.Fault == FaultAbandon || a.Fault == FaultRelease || a.Fault == FaultLate) {
			faults[a.Fault]++
		}
		if a.Err != nil {
			if sqlonce.IsRetryable(a.Err) {
				retryable++
			}
			c.errs++
			errs[errClass(a.Err)]++
		}
		if (a.InTx || a.Run) && a.CommitStart > 0 {
			commits[a.Commit]++
		}
		for _, st := range a.Steps {
			switch st.Outcome {
			case sqlonce.FirstRun:
				c.first[a.Commit]++
			case sqlonce.AlreadyDone:
				c.done++
			}
		}
	}
	add := func(format string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(format, args...)) }
	add("checker %s: %s, ran %v: %d attempts (%d retries), %d begin failures",
		r.Dialect, r.Config, r.Elapsed.Round(time.Millisecond), len(r.Attempts), retries, r.notes["begin failed"])
	add("  %-34s %8s %13s %11s %9s %8s %8s", "workload", "attempts", "first+commit", "first+maybe", "first+rb", "done", "errors")
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		c := ops[name]
		add("  %-34s %8d %13d %11d %9d %8d %8d", name, c.attempts, c.first[Committed], c.first[Unknown],
			c.first[NoCommit]+c.first[RolledBack], c.done, c.errs)
	}
	if len(r.Attempts) == 0 {
		// Only workloads that record no attempts ran (Steps).
	} else if slow := slices.MaxFunc(r.Attempts, func(a, b *Attempt) int { return int(a.Took - b.Took) }); slow != nil {
		iso := string(slow.Iso)
		if slow.Run {
			iso = "Run's own transaction"
		}
		add("  slowest attempt: %v, %s at %s, fault %q: %v", slow.Took.Round(time.Millisecond), slow.Op, iso, slow.Fault, slow.Err)
	}
	add("  faults: %s", joinCounts(faults))
	add("  errors: %s", joinCounts(errs))
	add("  retries: %d attempts after a failed one; %d failures sqlonce.IsRetryable accepts", retries, retryable)
	add("  commits: %d committed, %d refused, %d unknown (of %d whose writes the database names, %d committed)",
		commits[Committed], commits[RolledBack], commits[Unknown], r.unknownNamed, r.unknownCommitted)
	if rc.Attempts > 0 {
		add("  dedupe.Store.Run: %d attempts: %d FirstRun, %d AlreadyDone, %d failed after fn (%d rolled back, %d commit unknown, of which %d committed); fn called %d times, more than once in %d attempts (at most %d)",
			rc.Attempts, rc.FirstRun, rc.AlreadyDone, rc.FailedRolledBack+rc.FailedUnknown, rc.FailedRolledBack, rc.FailedUnknown, rc.UnknownCommitted,
			rc.Calls, rc.Repeated, rc.MaxCalls)
		add("  dedupe.Store.Run: took %d lapsed leases over (%d late completions refused); faults: %s",
			rc.LeaseTakeovers, rc.FencedCompletions, joinCounts(rc.Faults))
		add("  dedupe.Store.Run errors: %s", joinCounts(rc.Errors))
	}
	add("  leases: %d claims won, %d takeovers, %d external calls; notes: %s",
		r.leaseClaims, r.leaseTakeovers, r.notes["lease external calls"], joinCounts(r.notes))
	for _, l := range r.netLines {
		add("  network: %s", l)
	}
	if len(r.netLines) > 0 {
		add("  network: %d Run errors at a cut COMMIT matched sqlonce.ErrCommitUnknown", r.commitUnknownErrs)
	}
	if r.ldKeys > 0 {
		add("  lease deadline: %d keys raced at their lease's deadline, %d taken over and done by a racer", r.ldKeys, r.ldTakeovers)
	}
	byKind := map[string]int{}
	for _, v := range r.Violations {
		byKind[v.Kind]++
	}
	add("  violations: %d %s", len(r.Violations), joinCounts(byKind))
}

func (rc *RunCounts) count(a *Attempt) {
	rc.Attempts++
	rc.Calls += a.Calls
	rc.MaxCalls = max(rc.MaxCalls, a.Calls)
	if a.Calls > 1 {
		rc.Repeated++
	}
	if a.Err != nil {
		rc.Errors[errClass(a.Err)]++
	}
	if a.Fault != NoFault {
		rc.Faults[a.Fault]++
	}
	for _, st := range a.Steps {
		switch {
		case a.Err == nil && st.Outcome == sqlonce.FirstRun:
			rc.FirstRun++
		case a.Err == nil && st.Outcome == sqlonce.AlreadyDone:
			rc.AlreadyDone++
		case st.Outcome == sqlonce.FirstRun && a.Commit == Unknown:
			rc.FailedUnknown++
		case st.Outcome == sqlonce.FirstRun:
			rc.FailedRolledBack++
		}
	}
}

func joinCounts[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := string(k)
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, m[k]))
	}
	return strings.Join(parts, " ")
}

// errClass names an attempt's error for the summary.
func errClass(err error) string {
	var pgErr *pgconn.PgError
	var myErr *mysql.MySQLError
	switch {
	case errors.Is(err, errInjected):
		return "injected"
	case errors.Is(err, errInjectedPanic):
		return "injected-panic"
	case errors.Is(err, sqlonce.ErrStaleRead):
		return "retry:stale-read"
	case sqlonce.IsRetryable(err) && errors.As(err, &pgErr):
		switch pgErr.Code {
		case "40001":
			return "retry:serialization"
		case "40P01":
			return "retry:deadlock"
		}
		return "retry:lock-timeout"
	case sqlonce.IsRetryable(err) && errors.As(err, &myErr):
		switch myErr.Number {
		case 1213:
			return "retry:deadlock"
		case 1020:
			return "retry:serialization"
		}
		return "retry:lock-timeout"
	case errors.Is(err, sqlonce.ErrInProgress):
		return "in-progress"
	case errors.Is(err, sqlonce.ErrLeaseLost):
		return "lease-lost"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &pgErr):
		return "pg:" + pgErr.Code
	case errors.As(err, &myErr):
		return fmt.Sprintf("mysql:%d", myErr.Number)
	}
	return "connection"
}
