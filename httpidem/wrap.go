package httpidem

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Wrap returns next made idempotent; its type fits routers' Use methods.
//
// A request with a handled method is checked before next runs: its
// Idempotency-Key (400 when malformed, or missing where required), its
// principal (401 when empty), its body (413 over the limit). Then the key
// decides: a new key runs next and records its response; a key recorded
// earlier with the same request fingerprint replays the response byte for
// byte, marked with ReplayHeader; with another fingerprint, 422; a key
// whose first request is still running, 409. Errors are RFC 9457 problem
// details (application/problem+json).
//
// next's response is buffered until it is recorded: streaming and
// http.Flusher are not available to it. In transactional mode next may be
// run more than once for one request, each time in a fresh transaction,
// when the database reports a deadlock or a serialization failure.
func (m *Middleware[TTx]) Wrap(next http.Handler) http.Handler {
	return m.wrap(next, nil)
}

// wrap is Wrap, or with steps, Steps: the request runs as steps in place
// of next, and every request must have a key.
func (m *Middleware[TTx]) wrap(next http.Handler, steps *dedupe.Operation[TTx]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if steps == nil && !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		key, present, err := parseKey(r.Header.Values(m.keyHeader), m.strictKey)
		if err != nil {
			m.problem(w, http.StatusBadRequest, CodeKeyInvalid, err.Error())
			return
		}
		if present && (key == "" || len(key) > sqlonce.MaxKeyLen) {
			m.problem(w, http.StatusBadRequest, CodeKeyInvalid, fmt.Sprintf("the Idempotency-Key value must be 1 to %d characters", sqlonce.MaxKeyLen))
			return
		}
		derived := !present && m.noRepeat > 0
		if !present && !derived && (steps != nil || m.required(r)) {
			m.problem(w, http.StatusBadRequest, CodeKeyMissing, "this operation requires an Idempotency-Key header with a unique key per operation, sent again unchanged on every retry")
			return
		}
		if !present && !derived && m.lease > 0 {
			next.ServeHTTP(w, r) // no key and no transaction to hand over
			return
		}
		var principal string
		if present || derived {
			if principal = m.principal(r); principal == "" {
				m.problem(w, http.StatusUnauthorized, CodeNoPrincipal, "idempotency keys are kept per authenticated caller; authenticate the request")
				return
			}
		}
		body, ok := m.readBody(w, r)
		if !ok {
			return
		}
		var req *dedupe.Request
		if present || derived {
			fp, err := m.fingerprint(r, body)
			if err != nil {
				m.problem(w, http.StatusBadRequest, CodeBodyUnreadable, "the request is not one this operation accepts: its fingerprint could not be computed")
				return
			}
			kind, ttl := byte('k'), time.Duration(0)
			if derived {
				key, kind, ttl = hex.EncodeToString(fp), 's', m.noRepeat
			}
			req = &dedupe.Request{Scope: idem.Scope(kind, principal), Key: key, Fingerprint: fp, TTL: ttl}
		}
		var op obs.Op
		if req != nil {
			op = obs.Start(m.observer, "httpidem", "Serve", req.Scope, req.Key)
			if op.On() {
				sw := &statusWriter{ResponseWriter: w}
				w = sw
				defer func() { op.Status(sw.status()); op.EndSet(r.Context()) }()
			}
		}
		if steps != nil {
			m.serveSteps(w, r, steps, principal, body, *req, &op)
			return
		}
		if m.lease > 0 {
			m.serveLease(w, r, next, body, *req, &op)
			return
		}
		m.serveTx(w, r, next, body, req, &op)
	})
}

// readBody reads the request body whole, refusing one over the limit,
// and reports whether the request goes on.
func (m *Middleware[TTx]) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() ([]byte, bool) {
		m.problem(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the request body is limited to %d bytes", m.maxBody))
		return nil, false
	}
	if r.ContentLength > m.maxBody {
		return tooLarge() // refused before a byte is read
	}
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.maxBody+1))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr) || int64(len(body)) > m.maxBody:
		return tooLarge()
	case err != nil:
		m.problem(w, http.StatusBadRequest, CodeBodyUnreadable, "the request body could not be read in full")
		return nil, false
	}
	return body, true
}

// serve runs h and returns what it panicked with, if it did.
func serve(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

// withBody returns r for the handler: ctx, and a fresh reader over the
// body the middleware read.
func withBody(ctx context.Context, r *http.Request, body []byte) *http.Request {
	r2 := r.WithContext(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r2
}
