package httpidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/owntx"
)

// the handler's writes and the recorded response, and commits before the
// client hears anything. req is nil for a request without a key.
func (m *Middleware[TTx]) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, body []byte, req *dedupe.Request, op *obs.Op) {
	ctx := r.Context()
	for attempt := 1; ; attempt++ {
		var (
			rec      *recorder
			res      sqlonce.Result
			panicked any
			// committing is set when fn returns nil: any error runTx
			// returns after that comes from COMMIT (or from what the
			// caller's WithTxFunc does after fn), and the transaction may
			// have committed.
			committing bool
		)
		err := m.runTx(ctx, func(ctx context.Context, tx TTx) error {
			run := func(ctx context.Context) ([]byte, error) {
				rec = newRecorder(m.maxResponse)
				fail := &failure{}
				hctx := context.WithValue(context.WithValue(ctx, txKey[TTx]{}, tx), failKey{}, fail)
				op.WorkStart()
				panicked = serve(next, rec, withBody(hctx, r, body))
				op.WorkEnd()
				if panicked != nil {
					return nil, errPanicked
				}
				if fail.err != nil {
					// Wrapped, so that dedupe sees a deadlock that took the
					// claim with it and does not try to undo the claim.
					return nil, &failedError{fail.err}
				}
				if rec.overrun {
					return nil, fmt.Errorf("%w: the handler wrote a body of more than %d bytes", sqlonce.ErrResponseTooLarge, m.maxResponse)
				}
				if !m.record(rec.finalStatus()) {
					return nil, errNotRecorded // rolls the handler's writes back too
				}
				return rec.encode(m.respHeaders, dedupe.MaxResponseSize)
			}
			var err error
			if req == nil {
				_, err = run(ctx)
			} else {
				res, err = m.store.DoResponse(ctx, tx, *req, run)
			}
			committing = err == nil
			return err
		})
		if panicked != nil {
			panic(panicked) // after the rollback; net/http answers the client
		}
		op.Tried(err)
		op.Set(res, err)
		var failed *failedError
		switch {
		case err == nil && req != nil && res.AlreadyDone():
			m.replay(w, r, res.Response)
		case err == nil:
			rec.writeTo(w)
		case committing && (errors.Is(err, sqlonce.ErrCommitUnknown) || !sqlonce.IsRetryable(err)):
			// Only an error the database reports for the transaction
			// (serialization failure, deadlock) says the commit did not
			// happen; after anything else it may have.
			if ctx.Err() == nil {
				m.unknown(w, r, err, req != nil)
			}
		case errors.As(err, &failed) && sqlonce.IsRetryable(failed.err) && attempt < txAttempts && owntx.Pause(ctx, attempt):
			continue
		case errors.Is(err, errNotRecorded) || errors.As(err, &failed):
			rec.writeTo(w)
		case errors.Is(err, sqlonce.ErrInProgress):
			m.inProgress(w)
		case errors.Is(err, sqlonce.ErrKeyReuse):
			m.reused(w)
		case errors.Is(err, sqlonce.ErrResponseTooLarge):
			m.tooLarge(w, r, err)
		case ctx.Err() != nil:
			// The client is gone and the transaction rolled back: nobody
			// to answer, nothing to report.
		case sqlonce.IsRetryable(err) && !driver.Classify(err).Has(driver.LockNotAvailable) && attempt < txAttempts && owntx.Pause(ctx, attempt):
			continue
		default:
			m.internal(w, r, err, notDone)
		}
		return
	}
}
