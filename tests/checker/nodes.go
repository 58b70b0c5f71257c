package checker

import (
	"math/rand/v2"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/unique"
)

// node is one view of the database the workload runs on: the run's db, or
// one of Config.Nodes on another server of a cluster, with the strategies
// built on its driver (leases and Run commit through that driver's pool).
type node[TTx any] struct {
	db    harness.DB[TTx]
	store *dedupe.Store[TTx]
	// runStores run the StoreRun workload, one per runShapes: each shape
	// of Run races the others and Do on the same keys.
	runStores [len(runShapes)]*dedupe.Store[TTx]
	ins       *unique.Inserter[TTx]
}

// runShapes are the Stores the StoreRun workload draws from, indexed by
// DedupeCall.Shape: each dedupe.Favor, and a Store that must not wait
// (which claims the key before fn).
var runShapes = [...]struct {
	name   string
	opt    dedupe.Option
	noWait bool
}{
	{"FavorDefault", dedupe.WithFavor(dedupe.FavorDefault), false},
	{"FavorFirstRuns", dedupe.WithFavor(dedupe.FavorFirstRuns), false},
	{"FavorRepeats", dedupe.WithFavor(dedupe.FavorRepeats), false},
	{"WithNoWait", dedupe.WithNoWait(), true},
}

func newNode[TTx any](db harness.DB[TTx]) (*node[TTx], error) {
	store, err := dedupe.New(db.Driver(), dedupe.WithTTL(keyTTL))
	if err != nil {
		return nil, err
	}
	n := &node[TTx]{db: db, store: store}
	for i, shape := range runShapes {
		if n.runStores[i], err = dedupe.New(db.Driver(), dedupe.WithTTL(keyTTL), shape.opt); err != nil {
			return nil, err
		}
	}
	if n.ins, err = unique.New(db.Driver()); err != nil {
		return nil, err
	}
	return n, nil
}

// nodeOf returns the node whose view db is (the first one if none is: a
// Deduper or Runner swapped in may be given another).
func (r *run[TTx]) nodeOf(db harness.DB[TTx]) *node[TTx] {
	for _, n := range r.nodes {
		if any(n.db) == any(db) {
			return n
		}
	}
	return r.nodes[0]
}

func newWorker[TTx any](r *run[TTx], id int, rng *rand.Rand) *worker[TTx] {
	w := &worker[TTx]{r: r, id: id, rng: rng, next: max(id, 0)}
	w.pick()
	return w
}

// pick moves the worker on to the next node for its next attempt; with one
// node, it stays there.
func (w *worker[TTx]) pick() {
	w.n = w.r.nodes[w.next%len(w.r.nodes)]
	w.next++
}
