package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// serveLease is lease mode: the key is claimed and committed as leased
// before the handler runs, then completed with the recorded response or
// released.
func (m *Middleware[TTx]) serveLease(w http.ResponseWriter, r *http.Request, next http.Handler, body []byte, req dedupe.Request, op *obs.Op) {
	ctx := r.Context()
	lease, res, err := m.claim(ctx, req)
	op.Set(res, err)
	op.Decided()
	switch {
	case errors.Is(err, sqlonce.ErrInProgress):
		m.inProgress(w)
		return
	case errors.Is(err, sqlonce.ErrKeyReuse):
		m.reused(w)
		return
	case errors.Is(err, sqlonce.ErrReadOnly) && ctx.Err() == nil:
		m.unavailable(w, r, err)
		return
	case errors.Is(err, sqlonce.ErrInvalidArgument) && ctx.Err() == nil:
		m.refused(w, r, err)
		return
	case err != nil:
		if ctx.Err() == nil {
			m.internal(w, r, err, notDone)
		}
		return
	case res.AlreadyDone():
		m.replay(w, r, res.Response)
		return
	}
	// The lease's bookkeeping must happen even when the client has gone:
	// the work may have been done.
	bg := context.WithoutCancel(ctx)
	release := func() {
		if err := m.store.Release(bg, lease); err != nil {
			m.onError(r, fmt.Errorf("httpidem: release lease on key %q: %w", req.Key, err))
		}
	}
	rec := newRecorder(m.maxResponse)
	fail := &failure{}
	hctx := context.WithValue(context.WithValue(ctx, leaseKey{}, lease), failKey{}, fail)
	op.WorkStart()
	p := serve(next, rec, withBody(hctx, r, body))
	op.WorkEnd()
	if p != nil {
		release()
		panic(p)
	}
	if fail.err != nil {
		release()
		rec.writeTo(w)
		return
	}
	var record []byte
	err = fmt.Errorf("%w: the handler wrote a body of more than %d bytes", sqlonce.ErrResponseTooLarge, m.maxResponse)
	if !rec.overrun {
		record, err = rec.encode(m.respHeaders, dedupe.MaxResponseSize)
	}
	if err != nil {
		// The work is done but its answer cannot be recorded: answer, and
		// record, a problem that says so, so that a retry does not run the
		// work again.
		m.onError(r, fmt.Errorf("httpidem: key %q: %w", req.Key, err))
		rec = newRecorder(dedupe.MaxResponseSize)
		m.problem(rec, http.StatusInternalServerError, CodeResponseTooLarge, tooLargeDone)
		record, err = rec.encode(problemHeaders, dedupe.MaxResponseSize)
		if err != nil {
			panic(err) // a problem's record is a few hundred bytes
		}
	}
	if !m.record(rec.finalStatus()) {
		release()
	} else if err := m.store.Complete(bg, lease, record); err != nil {
		// The work is done and its answer is the client's; only the
		// record failed. A lost lease means another request took the
		// key over after this one overran the lease.
		m.onError(r, fmt.Errorf("httpidem: complete lease on key %q: %w", req.Key, err))
	} else {
		// The Event reports the response recorded, as a replay of it
		// will (and as transactional mode does).
		res.Response = record
		op.Set(res, nil)
	}
	rec.writeTo(w)
}

// claim claims req's key for a lease, waiting as WithWait says.
func (m *Middleware[TTx]) claim(ctx context.Context, req dedupe.Request) (lease *dedupe.Lease, res sqlonce.Result, err error) {
	err = m.waitFree(ctx, func() error {
		lease, res, err = m.store.Claim(ctx, req, m.lease)
		return err
	})
	return lease, res, err
}

// waitFree calls try until it returns anything but sqlonce.ErrInProgress:
// once without WithWait; with it, at growing intervals until the wait is
// over. A key leased to another request is asked for again, holding no
// connection in between.
func (m *Middleware[TTx]) waitFree(ctx context.Context, try func() error) error {
	deadline := time.Now().Add(m.wait)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := try()
		if !errors.Is(err, sqlonce.ErrInProgress) || m.wait == 0 {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
