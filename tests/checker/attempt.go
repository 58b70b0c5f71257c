package checker

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// CommitState is how an attempt's transaction ended.
type CommitState uint8

const (
	// NoCommit: COMMIT was never sent (the attempt failed or rolled back).
	NoCommit CommitState = iota
	// Committed: COMMIT succeeded.
	Committed
	// RolledBack: COMMIT was refused, or provably never reached the server.
	RolledBack
	// Unknown: COMMIT was sent and no answer came back. Maybe committed;
	// the database decides.
	Unknown
)

func (c CommitState) String() string {
	return [...]string{"no commit", "committed", "rolled back at commit", "commit unknown"}[c]
}

// Fault is a fault injected into an attempt.
type Fault string

const (
	NoFault          Fault = ""
	FaultFnError     Fault = "fn error"               // the work returns an error
	FaultFnPanic     Fault = "fn panic"               // the work panics; the worker recovers and rolls back
	FaultCancel      Fault = "ctx cancel in fn"       // the work cancels the context, then returns nil
	FaultCancelAsync Fault = "ctx cancel at random"   // a timer cancels the context anywhere, COMMIT included
	FaultKill        Fault = "conn kill in fn"        // the work has its connection killed from another session
	FaultKillAsync   Fault = "conn kill at random"    // another session kills the connection anywhere, COMMIT included
	FaultRollback    Fault = "rollback after success" // the caller rolls back after the strategy reported
	FaultAbandon     Fault = "lease holder dies"      // a lease is claimed and never completed or released
	FaultRelease     Fault = "lease released"         // the external work failed: the lease is released
	FaultLate        Fault = "lease holder late"      // the external work outlasts the lease, then the holder completes
)

var txFaults = []Fault{FaultFnError, FaultFnPanic, FaultCancel, FaultCancelAsync, FaultKill, FaultKillAsync, FaultRollback}

// runFaults are the faults of dedupe.Store.Run, which owns its
// transaction: no caller rolls back after it reported. The random kill is
// armed when fn first runs, the connection being Run's; it lands in fn, in
// the commit, or after.
var runFaults = []Fault{FaultFnError, FaultFnPanic, FaultCancel, FaultCancelAsync, FaultKill, FaultKillAsync}

// leaseFaults weighs the lease's own faults up: dead holders are what
// takeovers and fencing are for.
var leaseFaults = append([]Fault{FaultAbandon, FaultAbandon, FaultAbandon, FaultRelease, FaultRelease, FaultLate, FaultLate}, txFaults...)

var (
	errInjected      = errors.New("checker: injected fault")
	errInjectedPanic = errors.New("checker: injected panic, recovered")
)

type injectedPanic struct{}

// Step is what one strategy call in an attempt reported.
type Step struct {
	// Key names the effect: "do:3", "resp:3", "u:3", "opt:2@15" (order 2
	// from version 15), "sm:3", "lease:3", "run:3" (Run's own keys, when
	// it runs without the Do, DoResponse and lease workloads).
	Key string
	// Kind is "" for a strategy call, KindRun for a dedupe.Store.Run, or
	// the lease call: "claim", "complete", "release".
	//
	// Run commits on its own, so its step is what it reported, except
	// that a Run whose fn completed and which then failed is recorded as
	// a FirstRun, with Err and the attempt's Commit saying how its commit
	// ended (unknown, or provably rolled back), and Response what fn
	// returned: the answer it would have given had the commit come back.
	Kind     string
	Outcome  sqlonce.Outcome
	Response []byte
	Token    int64 // lease token (claim won, complete)
	At       int64 // logical time the call returned
	Err      error

	a *Attempt
}

func (s *Step) set(res sqlonce.Result, err error, at int64) {
	s.Outcome, s.Response, s.Err, s.At = res.Outcome, res.Response, err, at
}

// Attempt is one transaction (or one lease call) of an operation.
type Attempt struct {
	ID     int64
	Worker int
	Node   int // index of the node the attempt ran on (Config.Nodes after the first)
	Op     string
	Try    int // 0 for the first attempt of an operation
	Iso    harness.Isolation
	Fault  Fault
	Steps  []*Step
	Err    error
	// InTx is true for attempts that ran a transaction of the worker's own.
	InTx bool
	// Run is true for attempts of dedupe.Store.Run and Store.RunBatch (a
	// transaction of the Store's own); Calls counts the calls of its fn,
	// which they repeat when they start over.
	Run   bool
	Calls int
	// NoWait is true for attempts on a Store that must not wait: a key
	// another transaction holds is sqlonce.ErrInProgress to them.
	NoWait bool
	Commit CommitState
	// CommitStart, CommitEnd: logical times around COMMIT. For Run,
	// CommitStart is when its fn last returned, just before Run commits.
	CommitStart, CommitEnd int64
	// Took is how long the attempt ran, for the slowest-attempt line.
	Took time.Duration
	// NetFired is true when the proxy fired the attempt's network fault
	// on its connection.
	NetFired bool
}

func (a *Attempt) step(key, kind string) *Step {
	s := &Step{Key: key, Kind: kind, a: a}
	a.Steps = append(a.Steps, s)
	return s
}

type worker[TTx any] struct {
	r        *run[TTx]
	id       int
	rng      *rand.Rand
	noFaults bool
	n        *node[TTx] // where the current attempt runs
	next     int        // the node of the next attempt
}

func (w *worker[TTx]) newAttempt(op string, try int) *Attempt {
	return w.newAttemptOf(op, try, w.r.txFaults)
}

// newAttemptOf starts an attempt whose fault, if any, is one of faults.
func (w *worker[TTx]) newAttemptOf(op string, try int, faults []Fault) *Attempt {
	w.pick()
	a := &Attempt{ID: w.r.ids.Add(1), Worker: w.id, Node: (w.next - 1) % len(w.r.nodes), Op: op, Try: try}
	isos := w.r.cfg.Isolations
	a.Iso = isos[w.rng.IntN(len(isos))]
	if w.faulty() {
		a.Fault = faults[w.rng.IntN(len(faults))]
	}
	return a
}

func (w *worker[TTx]) faulty() bool {
	return !w.noFaults && w.r.cfg.FaultRate > 0 && w.rng.Float64() < w.r.cfg.FaultRate
}

// jitter is a random delay within the span of a typical attempt.
func (w *worker[TTx]) jitter() time.Duration {
	return time.Duration(w.rng.Int64N(int64(4 * time.Millisecond)))
}

func (w *worker[TTx]) sleep(max time.Duration) {
	time.Sleep(time.Duration(w.rng.Int64N(int64(max))))
}

// backoff waits before the next attempt of an operation, longer when the
// database looked unreachable.
func (w *worker[TTx]) backoff(err error) {
	switch {
	case sqlonce.IsRetryable(err), errors.Is(err, errInjected), errors.Is(err, errInjectedPanic):
		w.sleep(2 * time.Millisecond)
	case errors.Is(err, sqlonce.ErrInProgress):
		w.sleep(5 * time.Millisecond)
	default:
		w.sleep(30 * time.Millisecond)
	}
}

// operation runs attempts of one operation until one of them commits with
// an answer, as a client retries a request that failed or whose answer it
// did not get, and records every attempt.
func (w *worker[TTx]) operation(op string, body func(a *Attempt)) {
	w.operationOf(op, w.r.txFaults, body)
}

// operationOf is operation with attempts whose faults are drawn from
// faults.
func (w *worker[TTx]) operationOf(op string, faults []Fault, body func(a *Attempt)) {
	deadline := time.Now().Add(w.r.cfg.ConnectRetry)
	// Once the run is over, a client gives up instead of retrying: an
	// operation left half done is as much a case as a finished one.
	for try := 0; try < 20 && (try == 0 || !w.r.stop.Load()); try++ {
		a := w.newAttemptOf(op, try, faults)
		began := time.Now()
		body(a)
		a.Took = time.Since(began)
		if a.Err == nil && a.Commit == Committed {
			w.r.record(a)
			return
		}
		if a.beginFailed() {
			// Nothing happened: count it, but keep the log to attempts.
			w.r.note("begin failed", 1)
			if time.Now().After(deadline) {
				return
			}
		} else {
			w.r.record(a)
		}
		w.backoff(a.Err)
	}
}

type beginError struct{ err error }

func (e beginError) Error() string { return "begin: " + e.err.Error() }
func (e beginError) Unwrap() error { return e.err }

func (a *Attempt) beginFailed() bool {
	var be beginError
	return errors.As(a.Err, &be)
}

// inTx runs body in a transaction of its own at the attempt's isolation
// level with the attempt's fault armed, then commits unless body failed or
// the fault says to roll back. It fills in a's error and commit state.
func (w *worker[TTx]) inTx(a *Attempt, body func(ctx context.Context, tx TTx, f *faultCtl[TTx]) error) {
	a.InTx = true
	ctx, cancel := context.WithTimeout(w.r.ctx, w.r.cfg.AttemptTimeout)
	defer cancel()
	tx, err := w.n.db.Begin(ctx, a.Iso)
	if err != nil {
		a.Err = beginError{err}
		return
	}
	f := w.arm(ctx, cancel, tx, a)
	defer f.disarm()
	finished := false
	defer func() {
		if finished {
			return
		}
		p := recover()
		if _, ok := p.(injectedPanic); !ok && p != nil {
			panic(p)
		}
		a.Err = errInjectedPanic
		w.rollback(tx)
	}()
	err = body(ctx, tx, f)
	finished = true
	if err == nil && a.Fault == FaultRollback {
		err = errInjected
	}
	if err != nil {
		a.Err = err
		w.rollback(tx)
		return
	}
	a.CommitStart = w.r.tick()
	err = w.n.db.Commit(ctx, tx)
	a.CommitEnd = w.r.tick()
	a.Commit = w.classifyCommit(err)
	a.Err = err
}

func (w *worker[TTx]) rollback(tx TTx) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = w.n.db.Rollback(ctx, tx)
}

// classifyCommit tells a commit that provably did not happen from one whose
// outcome is unknown.
func (w *worker[TTx]) classifyCommit(err error) CommitState {
	switch {
	case err == nil:
		return Committed
	case errors.Is(err, pgx.ErrTxCommitRollback), // the server answered ROLLBACK
		errors.Is(err, sql.ErrTxDone): // database/sql rolled back first (context done)
		// Not pgconn.SafeToRetry: pgx reports a connection lost while it
		// reads the answer to a COMMIT it sent as "conn closed", the
		// error it gives before sending anything, which SafeToRetry
		// calls safe. A reply to COMMIT dropped by the fault proxy showed
		// it: such a COMMIT is unknown, and committed.
		return RolledBack
	case serverRefused(err):
		return RolledBack
	case w.n.db.Dialect() != "postgres" && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// database/sql checks the context before COMMIT and returns its
		// error without sending it; go-sql-driver's COMMIT itself does not
		// watch the context, nor does modernc.org/sqlite's.
		return RolledBack
	}
	return Unknown
}

// faultCtl fires an attempt's fault: at the first call of inFn for the
// faults that happen inside the work, or on a timer armed at BEGIN for the
// ones that may land anywhere, COMMIT included.
type faultCtl[TTx any] struct {
	w      *worker[TTx]
	a      *Attempt
	cancel context.CancelFunc
	fired  bool
	timer  *time.Timer
	done   chan struct{}
	wg     sync.WaitGroup
	net    netArm // the network fault armed at the proxy, if any
}

func (w *worker[TTx]) arm(ctx context.Context, cancel context.CancelFunc, tx TTx, a *Attempt) *faultCtl[TTx] {
	f := &faultCtl[TTx]{w: w, a: a, cancel: cancel, done: make(chan struct{})}
	switch a.Fault {
	case FaultCancelAsync:
		f.timer = time.AfterFunc(w.jitter(), cancel)
	case FaultKillAsync:
		// Right after BEGIN, before any write: an error here fails the
		// attempt's first statement too.
		_ = f.killLater(ctx, tx)
	default:
		f.armNet(ctx, tx)
	}
	return f
}

// newFaultCtl is arm for an attempt whose transaction is not begun yet
// (dedupe.Store.Run's): the random cancel is armed now, the random kill by
// killLater once the transaction exists.
func (w *worker[TTx]) newFaultCtl(cancel context.CancelFunc, a *Attempt) *faultCtl[TTx] {
	f := &faultCtl[TTx]{w: w, a: a, cancel: cancel, done: make(chan struct{})}
	if a.Fault == FaultCancelAsync {
		f.timer = time.AfterFunc(w.jitter(), cancel)
	}
	return f
}

// killLater kills tx's connection from another session after a random
// delay, unless the attempt ends first. It reads the connection's id in
// tx: an error there is the transaction's, and the work must return it as
// any other. On MySQL/MariaDB a deadlock, or a Galera node aborting the
// transaction for a conflicting write of another node, rolls the whole
// transaction back, and the connection runs what follows outside any
// transaction, each statement committing on its own: work that went on
// after swallowing the error would commit without its claim.
func (f *faultCtl[TTx]) killLater(ctx context.Context, tx TTx) error {
	id, err := f.w.n.db.ConnID(ctx, tx)
	if err != nil {
		return err
	}
	delay := f.w.jitter()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		select {
		case <-f.done:
			// The attempt ended first. A kill racing the end of the
			// attempt may still hit the connection back in the pool:
			// another attempt then fails with a connection error,
			// which is a fault like any other.
		case <-time.After(delay):
			f.w.kill(id)
		}
	}()
	return nil
}

func (f *faultCtl[TTx]) disarm() {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.disarmNet()
	close(f.done)
	f.wg.Wait()
}

// inFn is called inside the work, after its write: the faults that happen
// there fire once per attempt.
func (f *faultCtl[TTx]) inFn(ctx context.Context, tx TTx) error {
	if f.fired {
		return nil
	}
	switch f.a.Fault {
	case FaultFnError:
		f.fired = true
		return errInjected
	case FaultFnPanic:
		f.fired = true
		panic(injectedPanic{})
	case FaultCancel:
		f.fired = true
		f.cancel()
	case FaultKill:
		f.fired = true
		id, err := f.w.n.db.ConnID(ctx, tx)
		if err != nil {
			return err
		}
		f.w.kill(id)
	case FaultHalfOpenFn:
		f.fired = true
		return f.halfOpenNow(ctx, tx)
	}
	return nil
}

func (w *worker[TTx]) kill(id int64) {
	ctx, cancel := context.WithTimeout(w.r.ctx, 10*time.Second)
	defer cancel()
	if err := w.n.db.Kill(ctx, id); err != nil {
		w.r.note("kill failed", 1)
	}
}

// serverRefused reports whether PostgreSQL answered COMMIT with an ERROR
// (a serialization failure found at commit): the transaction rolled back.
// A FATAL (the connection being terminated) leaves the outcome unknown.
func serverRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
}
