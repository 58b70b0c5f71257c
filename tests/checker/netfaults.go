package checker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
)

// The network faults, fired by Config.Proxy on the attempt's own
// connection (named by the server's id for it). They exist on PostgreSQL
// and MySQL/MariaDB; SQLite has no connection to cut.
const (
	// FaultLoseReply: COMMIT reaches the server, which commits; its
	// answer is dropped and the client's connection reset. The commit is
	// unknown to the client; the database says it happened.
	FaultLoseReply Fault = "reply to COMMIT lost"
	// FaultLoseCommit: the connection is reset as COMMIT is sent, which
	// never reaches the server: it rolls back.
	FaultLoseCommit Fault = "COMMIT lost"
	// FaultHalfOpenCommit: at COMMIT the proxy stops forwarding without
	// closing. The client's deadline fires (or, where the driver's COMMIT
	// ignores the context, the proxy's reset after its hold); only then
	// does the server's side end, with the held COMMIT delivered (the
	// server commits behind the back of a client that gave up) or dropped.
	FaultHalfOpenCommit Fault = "half-open at COMMIT"
	// FaultHalfOpenFn is FaultHalfOpenCommit from inside the work: the
	// statements after it hang, the client gives up, and whatever it sent
	// meanwhile reaches the server after the hold, or never.
	FaultHalfOpenFn Fault = "half-open in fn"
)

var netFaults = []Fault{FaultLoseReply, FaultLoseCommit, FaultHalfOpenCommit, FaultHalfOpenFn}

const (
	// halfOpenDeadline is the client's deadline once a half-open fault is
	// armed: past an attempt's usual length, short of the proxy's hold.
	halfOpenDeadline = 250 * time.Millisecond
	// HalfOpenHold is how long the proxy keeps a half-open connection
	// before resetting the client's side: pass it to faultproxy.Start.
	HalfOpenHold = 600 * time.Millisecond
)

func isNetFault(f Fault) bool {
	return f == FaultLoseReply || f == FaultLoseCommit || f == FaultHalfOpenCommit || f == FaultHalfOpenFn
}

// netArm is a network fault armed on a connection.
type netArm struct {
	id    int64 // server id of the connection; 0: none armed
	armed bool  // armed at COMMIT and not known to have fired
}

// armNet arms the attempt's network fault on tx's connection: at its
// COMMIT for the commit faults; the half-open faults also give the client
// its deadline. Called at BEGIN (a transaction of the worker's own) or at
// the first call of Run's fn.
func (f *faultCtl[TTx]) armNet(ctx context.Context, tx TTx) {
	p := f.w.r.cfg.Proxy
	if p == nil || !isNetFault(f.a.Fault) || f.net.id != 0 {
		return
	}
	id, err := f.w.n.db.ConnID(ctx, tx)
	if err != nil {
		return // the attempt fails on its own
	}
	f.net.id = id
	pf := faultproxy.None
	switch f.a.Fault {
	case FaultLoseReply:
		pf = faultproxy.LoseReply
	case FaultLoseCommit:
		pf = faultproxy.LoseCommit
	case FaultHalfOpenCommit:
		pf = faultproxy.HalfOpenDrop
		if f.w.rng.IntN(2) == 0 {
			pf = faultproxy.HalfOpenDeliver
		}
	}
	if pf != faultproxy.None {
		if !p.Arm(id, pf) {
			f.w.r.note("proxy did not carry the connection", 1)
			return
		}
		f.net.armed = true
	}
	if f.a.Fault == FaultHalfOpenCommit && f.timer == nil {
		f.timer = time.AfterFunc(halfOpenDeadline, f.cancel)
	}
}

// halfOpenNow makes tx's connection half-open from inside the work.
func (f *faultCtl[TTx]) halfOpenNow(ctx context.Context, tx TTx) error {
	p := f.w.r.cfg.Proxy
	if p == nil || f.net.id == 0 {
		return nil
	}
	if !p.Blackhole(f.net.id, f.w.rng.IntN(2) == 0) {
		f.w.r.note("proxy did not carry the connection", 1)
		return nil
	}
	f.a.NetFired = true
	if f.timer == nil {
		f.timer = time.AfterFunc(halfOpenDeadline, f.cancel)
	}
	return nil
}

// disarmNet clears a commit fault that did not fire (the attempt ended
// before COMMIT), so that the pooled connection does not carry it into
// another attempt, and records whether it fired.
func (f *faultCtl[TTx]) disarmNet() {
	p := f.w.r.cfg.Proxy
	if p == nil || !f.net.armed {
		return
	}
	if p.FiredOn(f.net.id) {
		f.a.NetFired = true
		return
	}
	p.Disarm(f.net.id)
}

// netCounts sums up the attempts that met a network fault.
type netCounts struct {
	fired, unknown, committed int
}

// checkNet checks what the network faults must leave: dedupe.Store.Run
// commits on its own, and a Run whose COMMIT was cut must say so with an
// error matching sqlonce.ErrCommitUnknown (the resend with the same key is
// the answer), unless its error proves that nothing committed. It also
// counts, per fault, the attempts whose fault fired, their unknown commits
// and how many of those the database says committed.
func (v *verifier) checkNet(s *dbState) {
	by := map[Fault]*netCounts{}
	for _, a := range v.rep.Attempts {
		if !isNetFault(a.Fault) || !a.NetFired {
			continue
		}
		c := by[a.Fault]
		if c == nil {
			c = &netCounts{}
			by[a.Fault] = c
		}
		c.fired++
		if a.Commit == Unknown {
			c.unknown++
			for _, st := range a.Steps {
				if st.Outcome == sqlonce.FirstRun && named(st.Key) && v.wrote(s, st) {
					c.committed++
					break
				}
			}
		}
		cut := a.Fault == FaultLoseReply || a.Fault == FaultLoseCommit
		if a.Run && cut && a.Err != nil && a.Commit == Unknown && !errors.Is(a.Err, sqlonce.ErrCommitUnknown) {
			key := ""
			if len(a.Steps) > 0 {
				key = a.Steps[0].Key
			}
			v.rep.violate(VError, key, "attempt %d (%s): its COMMIT was cut (%s), and Run's error does not match sqlonce.ErrCommitUnknown: %v", a.ID, a.Op, a.Fault, a.Err)
		}
		if a.Run && cut && errors.Is(a.Err, sqlonce.ErrCommitUnknown) {
			v.rep.commitUnknownErrs++
		}
	}
	for _, f := range netFaults {
		if c := by[f]; c != nil {
			v.rep.netLines = append(v.rep.netLines, fmt.Sprintf("%s: %d fired, %d commits unknown, of which %d committed", f, c.fired, c.unknown, c.committed))
		}
	}
}
