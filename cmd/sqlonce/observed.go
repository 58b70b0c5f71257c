package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/sqlonce/sqlonce"
)

// tally is the Observer the demo attaches to its driver (and ctx): it
// counts what sqlonceotel would export as sqlonce.operations, by strategy
// and outcome, and sqlonce.retries, to print next to what the demo
// counted itself.
type tally struct {
	mu      sync.Mutex
	ops     map[string]map[sqlonce.EventStatus]int64
	retries map[string]int64
}

func newTally() *tally {
	return &tally{ops: map[string]map[sqlonce.EventStatus]int64{}, retries: map[string]int64{}}
}

func (t *tally) Observe(_ context.Context, e sqlonce.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.ops[e.Strategy]
	if m == nil {
		m = map[sqlonce.EventStatus]int64{}
		t.ops[e.Strategy] = m
	}
	m[e.Status]++
	if e.Attempts > 1 {
		t.retries[e.Strategy] += int64(e.Attempts - 1)
	}
}

// staged is a failure the demo caused on purpose, as the Observer counts
// it: n operations of strategy failed because "what".
type staged struct {
	strategy string
	n        int64
	what     string
}

// outcomeHelp says what each outcome column counts, in the demo's words.
var outcomeHelp = map[sqlonce.EventStatus]string{
	sqlonce.EventFirstRun:    "the call did the work",
	sqlonce.EventAlreadyDone: "an earlier call had done the work; nothing recorded to hand back",
	sqlonce.EventReplayed:    "an earlier call had done the work; its recorded answer was handed back",
	sqlonce.EventInProgress:  "another caller held the key; the call waited and asked again",
	sqlonce.EventKeyReuse:    "the key came back with another request, refused",
	sqlonce.EventLeaseLost:   "a lease holder found its lease taken over",
	sqlonce.EventTakeover:    "the call took over the lapsed lease of the worker the demo killed",
	sqlonce.EventOK:          "a call that answers no Result succeeded: a lease completed, a token issued",
}

// print writes one row per strategy, a column per outcome seen, then what
// each column counts and which errors were the failures the demo staged.
func (t *tally) print(out io.Writer, staged []staged) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var strategies []string
	seen := map[sqlonce.EventStatus]bool{}
	for s, m := range t.ops {
		strategies = append(strategies, s)
		for o := range m {
			seen[o] = true
		}
	}
	sort.Strings(strategies)
	var outcomes []sqlonce.EventStatus
	for o := sqlonce.EventError; o <= sqlonce.EventOK; o++ {
		if seen[o] {
			outcomes = append(outcomes, o)
		}
	}
	fmt.Fprintf(out, "\nWhat an Observer saw (sqlonce.Observe; sqlonceotel exports these as sqlonce.operations and sqlonce.retries):\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "strategy")
	for _, o := range outcomes {
		fmt.Fprintf(w, "\t%s", o)
	}
	fmt.Fprintln(w, "\tretries")
	var errs int64
	for _, s := range strategies {
		fmt.Fprint(w, s)
		for _, o := range outcomes {
			fmt.Fprintf(w, "\t%d", t.ops[s][o])
		}
		fmt.Fprintf(w, "\t%d\n", t.retries[s])
		errs += t.ops[s][sqlonce.EventError]
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, o := range outcomes {
		if o == sqlonce.EventError {
			fmt.Fprintf(w, "  %s\tfailed calls (below)\n", o)
			continue
		}
		fmt.Fprintf(w, "  %s\t%s\n", o, outcomeHelp[o])
	}
	fmt.Fprintf(w, "  retries\ttransactions sqlonce ran again itself after a deadlock or a serialization failure\n")
	if err := w.Flush(); err != nil {
		return err
	}
	if errs > 0 {
		fmt.Fprintf(out, "\n%s\n", wrap(errorHelp(errs, staged), 80))
	}
	return nil
}

// wrap breaks s into lines of at most width bytes, between words.
func wrap(s string, width int) string {
	var sb strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		switch {
		case i == 0:
		case n+1+len(word) > width:
			sb.WriteByte('\n')
			n = 0
		default:
			sb.WriteByte(' ')
			n++
		}
		sb.WriteString(word)
		n += len(word)
	}
	return sb.String()
}

// errorHelp says what the error column counts: the failures the demo
// staged, and any others, which can only be conflicts the demo's
// transactions ran again (any other error stops the demo).
func errorHelp(errs int64, staged []staged) string {
	var n int64
	var parts []string
	for _, s := range staged {
		if s.n == 0 {
			continue
		}
		n += s.n
		parts = append(parts, fmt.Sprintf("%d %s (%s)", s.n, s.what, s.strategy))
	}
	var sb strings.Builder
	if n == errs {
		fmt.Fprintf(&sb, "The %d errors are the failures the demo staged, not bugs: ", errs)
	} else {
		fmt.Fprintf(&sb, "Of the %d errors, %d are the failures the demo staged, not bugs: ", errs, n)
	}
	sb.WriteString(strings.Join(parts, " and "))
	sb.WriteString("; each was sent again and succeeded.")
	if errs > n {
		fmt.Fprintf(&sb, " The other %d met a conflict the database reported (a deadlock, a serialization failure) and the demo ran their transactions again.", errs-n)
	}
	return sb.String()
}
