package main

import (
	"context"
	"fmt"
	"io"
	"sort"
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
	ops     map[string]map[sqlonce.EventOutcome]int64
	retries map[string]int64
}

func newTally() *tally {
	return &tally{ops: map[string]map[sqlonce.EventOutcome]int64{}, retries: map[string]int64{}}
}

func (t *tally) Observe(_ context.Context, e sqlonce.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.ops[e.Strategy]
	if m == nil {
		m = map[sqlonce.EventOutcome]int64{}
		t.ops[e.Strategy] = m
	}
	m[e.Outcome]++
	if e.Attempts > 1 {
		t.retries[e.Strategy] += int64(e.Attempts - 1)
	}
}

// print writes one row per strategy, a column per outcome seen.
func (t *tally) print(out io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var strategies []string
	seen := map[sqlonce.EventOutcome]bool{}
	for s, m := range t.ops {
		strategies = append(strategies, s)
		for o := range m {
			seen[o] = true
		}
	}
	sort.Strings(strategies)
	var outcomes []sqlonce.EventOutcome
	for o := sqlonce.EventError; o <= sqlonce.EventDone; o++ {
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
	for _, s := range strategies {
		fmt.Fprint(w, s)
		for _, o := range outcomes {
			fmt.Fprintf(w, "\t%d", t.ops[s][o])
		}
		fmt.Fprintf(w, "\t%d\n", t.retries[s])
	}
	return w.Flush()
}
