package httpidem

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// the handler's writes and the recorded response, and commits before the
// client hears anything. req is nil for a request without a key.
func (m *Middleware[TTx]) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, body []byte, req *dedupe.Request, op *obs.Op) {
	ctx := r.Context()
	var (
		rec      *recorder // the last attempt's answer
		panicked any
	)
	res, out, err := m.runner.Serve(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
		rec = newRecorder(m.maxResponse)
		fail := &failure{}
		hctx := context.WithValue(context.WithValue(ctx, txKey[TTx]{}, tx), failKey{}, fail)
		op.WorkStart()
		panicked = serve(next, rec, withBody(hctx, r, body))
		op.WorkEnd()
		if panicked != nil {
			return nil, idem.ErrPanicked
		}
		if fail.err != nil {
			// Wrapped, so that dedupe sees a deadlock that took the claim
			// with it and does not try to undo the claim.
			return nil, &idem.Failure{Err: fail.err}
		}
		if rec.overrun {
			return nil, fmt.Errorf("%w: the handler wrote a body of more than %d bytes", sqlonce.ErrResponseTooLarge, m.maxResponse)
		}
		if !m.record(rec.finalStatus()) {
			return nil, idem.ErrNotRecorded // rolls the handler's writes back too
		}
		return rec.encode(m.respHeaders, dedupe.MaxResponseSize)
	}, op)
	if panicked != nil {
		panic(panicked) // after the rollback; net/http answers the client
	}
	switch out {
	case idem.Replayed:
		m.replay(w, r, res.Response)
	case idem.Answered:
		rec.writeTo(w)
	case idem.Unknown:
		m.unknown(w, r, err, req != nil)
	case idem.InProgress:
		m.inProgress(w)
	case idem.Reused:
		m.reused(w)
	case idem.TooLarge:
		m.tooLarge(w, r, err)
	case idem.ReadOnly:
		m.unavailable(w, r, err)
	case idem.Refused:
		m.refused(w, r, err)
	case idem.Gone:
		// The client is gone: nobody to answer, nothing to report.
	default:
		m.internal(w, r, err, notDone)
	}
}
