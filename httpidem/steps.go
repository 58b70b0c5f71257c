package httpidem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Steps returns a handler that runs each request as op, an operation of
// several steps (dedupe.Operation): database steps that commit once each,
// outside steps that call a payment provider or a mail server with a key
// of their own (dedupe.StepState.Key). A request stopped between or
// inside its steps (a crash, a client gone, a step's error) is finished
// by a retry with the same Idempotency-Key, which resumes after the last
// step done, or by the resumer (ResumeEvery); the steps done before
// do not run again.
//
//	mux.Handle("POST /checkout", m.Steps(checkout))
//
// The steps read the request from their state with RequestOf: they may
// run long after the request ended, in the resumer, so they get what
// the middleware read (the principal, method, route, path, query, key and
// body), never the *http.Request. The last step's result is the answer:
// build it with Respond. It is recorded with the key, as Wrap records a
// handler's, and replayed byte for byte, marked with ReplayHeader, to
// every repeat; WithRecord and WithMaxResponseSize do not apply (every
// answer is recorded, up to dedupe.MaxResponseSize).
//
// Everything else is as Wrap does: the key's checks, 401 without a
// principal, 413 for a large body, 422 for the key sent with another
// request or to another operation's handler (another op.Name: running,
// stopped, done or given up, the key is its operation's), 409 while
// another request runs the key's steps (or a wait, with WithWait), 503
// when the database takes no writes. Every request
// the handler gets runs as op: neither WithMethods nor WithRequired
// applies, and a request without a key is answered 400, unless
// WithNoRepeatSubmit derives one. A step's error, or a run that lost the
// key to another, is answered 500 with CodeOutcomeUnknown: part of the
// work may be done, and the same request with the same key finishes it.
// An operation the resumer gave up (dedupe.ErrOperationFailed) is
// answered 500 with CodeInternal to every repeat of its key. A panic in a
// step goes on to net/http, and a client that goes away stops the steps
// where they are: either way the key's lease lapses after op.Lease (409
// to a retry until then), and a retry or the resumer finishes the
// request. A panic in a step the resumer runs is that key's error, as
// dedupe.Store.ResumeStuck says.
//
// The steps' keys are scoped by the principal alone: the dedupe scope is
// "k:" + principal ("s:" + principal for a key WithNoRepeatSubmit
// derives; either hashed, "k#" or "s#" and a hex SHA-256 of it, when it
// is no valid scope: over 255 bytes, not UTF-8), never the route or the
// method, so dedupe.StepState.Key is
// dedupe.StepKey of that scope, the key and the step's name: two callers'
// equal keys are apart, and one caller's key names one request across
// every Steps handler. The request (principal, method, route, path,
// query, key and body) is the operation's input, within
// dedupe.MaxResponseSize with the steps' results; WithMaxBody (1 MiB by
// default) keeps the body well below it; with a WithMaxBody above it, a
// request too large for it is answered 413.
//
// The Middleware's mode does not matter: the steps run in transactions of
// the Store's own (the driver's database handle), not in NewWithTxFunc's
// TxFunc, and need no lease mode; a Middleware on a driver without a database
// handle answers every request 500. Their keys are apart from those Wrap
// handles.
func (m *Middleware[TTx]) Steps(op *dedupe.Operation[TTx]) http.Handler {
	return m.wrap(nil, op)
}

// serveSteps runs a request with a key as steps.
func (m *Middleware[TTx]) serveSteps(w http.ResponseWriter, r *http.Request, steps *dedupe.Operation[TTx], principal string, body []byte, req dedupe.Request, op *obs.Op) {
	ctx := r.Context()
	input := StepRequest{
		Principal: principal, Method: r.Method, Route: m.route(r), Path: r.URL.EscapedPath(),
		Query: r.URL.RawQuery, Key: req.Key, Body: body,
	}.encode()
	if len(input)+len(steps.Name)+inputOverhead > dedupe.MaxResponseSize {
		// Too large to store as the operation's input: nothing ran, so
		// not the 500 "outcome unknown" of RunSteps' ErrResponseTooLarge.
		m.problem(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the request is too large to run as steps: %d bytes with its key and route, limit %d", len(input), dedupe.MaxResponseSize-len(steps.Name)-inputOverhead))
		return
	}
	var res sqlonce.Result
	op.WorkStart()
	err := m.waitFree(ctx, func() (err error) {
		res, err = m.store.RunSteps(ctx, req, input, steps)
		return err
	})
	op.WorkEnd()
	op.Set(res, err)
	op.Decided()
	switch {
	case err == nil && res.AlreadyDone():
		m.replay(w, r, res.Response)
	case err == nil:
		rec, derr := decode(res.Response)
		if derr != nil {
			m.internal(w, r, fmt.Errorf("httpidem: key %q: the last step of %q did not answer with Respond: %w", req.Key, steps.Name, derr), notRecords)
			return
		}
		rec.writeTo(w)
	case ctx.Err() != nil:
		// The client is gone: the steps stopped where they were, for a
		// retry or the resumer to finish.
	case errors.Is(err, sqlonce.ErrInProgress):
		m.inProgress(w)
	case errors.Is(err, sqlonce.ErrKeyReuse):
		m.reused(w)
	case errors.Is(err, sqlonce.ErrReadOnly):
		m.unavailable(w, r, err)
	case errors.Is(err, dedupe.ErrOperationFailed):
		m.internal(w, r, err, givenUp)
	case errors.Is(err, sqlonce.ErrInvalidArgument):
		m.refused(w, r, err)
	default:
		// A step failed, or the run lost the key: the steps before are
		// done, and a retry resumes after them.
		m.onError(r, err)
		m.problem(w, http.StatusInternalServerError, CodeOutcomeUnknown, unfinished)
	}
}

// ResumeStuck finishes requests run as steps (Steps) whose run stopped
// and that no retry took over since, as dedupe.Store.ResumeStuck does
// for dedupe's operations: ops are the operations the Middleware's Steps
// handlers run. Run it, or ResumeEvery, so that a request its client
// abandoned is finished all the same; its answer then waits, recorded, for
// a retry with the key.
func (m *Middleware[TTx]) ResumeStuck(ctx context.Context, maxAttempts int, ops ...*dedupe.Operation[TTx]) (finished, failed int, err error) {
	return m.store.ResumeStuck(ctx, maxAttempts, ops...)
}

// ResumeEvery runs ResumeStuck every interval until ctx is done, as
// dedupe.Store.ResumeEvery does, one instance at a time: start it once
// per program, in a goroutine of its own, with every operation the
// program's Steps handlers run.
//
//	go m.ResumeEvery(ctx, time.Minute, 5, checkout)
func (m *Middleware[TTx]) ResumeEvery(ctx context.Context, interval time.Duration, maxAttempts int, ops ...*dedupe.Operation[TTx]) error {
	return m.store.ResumeEvery(ctx, interval, maxAttempts, ops...)
}

// StepRequest is the request a Steps handler runs, as its steps read it
// with RequestOf.
type StepRequest struct {
	// Principal is the caller, as the Middleware's principal func named
	// it.
	Principal string
	// Method is the request's method.
	Method string
	// Route is the route that matched, as WithRoute names it (by default
	// the ServeMux pattern).
	Route string
	// Path and Query are the URL's escaped path and raw query.
	Path, Query string
	// Key is the request's idempotency key (derived, with
	// WithNoRepeatSubmit, for a request without one).
	Key string
	// Body is the request body, as read.
	Body []byte
}

const stepRequestV1 byte = 1

// inputOverhead bounds what dedupe's first recovery point adds to the
// input and the operation's name (a version byte and five varints): an
// input within MaxResponseSize less it and the name is stored.
const inputOverhead = 64

func (q StepRequest) encode() []byte {
	b := []byte{stepRequestV1}
	for _, s := range []string{q.Principal, q.Method, q.Route, q.Path, q.Query, q.Key} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(q.Body)))
	return append(b, q.Body...)
}

var errBadStepRequest = errors.New("httpidem: the operation's input is not a request of Steps")

// RequestOf returns the request a Steps handler runs op for, from a
// step's state. It fails for a state whose input is not one (a step of an
// operation run by dedupe.Store.RunSteps).
func RequestOf(st dedupe.StepState) (StepRequest, error) {
	b := st.Input
	if len(b) == 0 || b[0] != stepRequestV1 {
		return StepRequest{}, errBadStepRequest
	}
	b = b[1:]
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	var f [7][]byte
	for i := range f {
		v, ok := next()
		if !ok {
			return StepRequest{}, errBadStepRequest
		}
		f[i] = v
	}
	if len(b) != 0 {
		return StepRequest{}, errBadStepRequest
	}
	return StepRequest{
		Principal: string(f[0]), Method: string(f[1]), Route: string(f[2]), Path: string(f[3]),
		Query: string(f[4]), Key: string(f[5]), Body: slices.Clone(f[6]),
	}, nil
}

// Respond is the answer of a request run as steps: the last step returns
// it as its result, and the Steps handler sends it, and replays it to
// every repeat, as Wrap does a handler's answer: status, every field of
// header, and body, byte for byte. status is a three-digit code; an
// answer whose record would be larger than dedupe.MaxResponseSize is an
// error matching sqlonce.ErrResponseTooLarge.
func Respond(status int, header http.Header, body []byte) ([]byte, error) {
	rec := newRecorder(len(body))
	for k, vs := range header {
		for _, v := range vs {
			rec.header.Add(k, v)
		}
	}
	rec.status = status
	rec.body.Write(body)
	names := make([]string, 0, len(rec.header))
	for k := range rec.header {
		names = append(names, k)
	}
	slices.Sort(names)
	// One byte of the Store's own marks a recorded response.
	return rec.encode(names, dedupe.MaxResponseSize-1)
}
