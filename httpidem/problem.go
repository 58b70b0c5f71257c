package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/sqlonce/sqlonce/internal/idem"
)

// Problem codes: the "code" member of every problem body the middleware
// writes, and the fragment of its "type" URI when WithDocs is set.
const (
	CodeKeyMissing     = "idempotency-key-missing"
	CodeKeyInvalid     = "idempotency-key-invalid"
	CodeKeyReused      = "idempotency-key-reused"
	CodeInProgress     = "idempotency-key-in-progress"
	CodeBodyTooLarge   = "request-body-too-large"
	CodeBodyUnreadable = "request-body-unreadable"
	CodeNoPrincipal    = "principal-missing"
	CodeInternal       = "internal"

	// CodeResponseTooLarge: the handler's answer could not be recorded
	// (its body is over WithMaxResponseSize, or its record over
	// dedupe.MaxResponseSize). In transactional mode the work rolled back
	// and the key is free; in lease mode the work was done, and this
	// problem is what the key replays.
	CodeResponseTooLarge = "response-too-large"

	// CodeOutcomeUnknown: the connection to the database was lost while
	// the request's transaction committed (sqlonce.ErrCommitUnknown), or,
	// with NewWithTxFunc, an error other than a retry request followed the
	// handler's work: the work may or may not have been done. Sending the request again with the same Idempotency-Key
	// replays its answer if it was, and runs it if it was not. A request
	// run as steps (Middleware.Steps) is answered so when a step failed or
	// its run lost the key: the steps before are done, and the same
	// request with the same key finishes it.
	CodeOutcomeUnknown = "outcome-unknown"

	// CodeUnavailable: the database refused the request's writes because
	// it takes none (sqlonce.ErrReadOnly): the application reached a
	// standby or read-only replica, or a primary that a failover is
	// demoting. Answered 503 with Retry-After: the request was not carried
	// out, and sending it again with the same Idempotency-Key once the
	// application reaches a primary runs it once.
	CodeUnavailable = "unavailable"
)

// Problem is an RFC 9457 problem details object, as the middleware writes
// it with media type application/problem+json.
type Problem struct {
	// Type identifies the problem type: "about:blank" unless WithDocs gave
	// a documentation URL, then that URL with Code as its fragment.
	Type string `json:"type"`
	// Title is a short summary of the problem type that does not change
	// from occurrence to occurrence: with "about:blank", the status
	// phrase, as RFC 9457 asks.
	Title string `json:"title"`
	// Status is the response's status code.
	Status int `json:"status"`
	// Detail tells the client what to correct. It never carries database
	// errors or other internals.
	Detail string `json:"detail,omitempty"`
	// Code is an extension member naming the problem for machines, stable
	// whether or not WithDocs is set: one of the Code constants.
	Code string `json:"code"`
}

// titles are the problem types' titles when a documentation URL gives
// them their own type.
var titles = map[string]string{
	CodeKeyMissing:     "Idempotency-Key is missing",
	CodeKeyInvalid:     "Idempotency-Key is not a valid key",
	CodeKeyReused:      "Idempotency-Key is already used",
	CodeInProgress:     "A request is outstanding for this Idempotency-Key",
	CodeBodyTooLarge:   "Request body too large",
	CodeBodyUnreadable: "Request body could not be read",
	CodeNoPrincipal:    "No authenticated caller",
	CodeInternal:       "The request could not be completed",

	CodeResponseTooLarge: "The answer is too large to record",
	CodeOutcomeUnknown:   "The outcome of the request is unknown",
	CodeUnavailable:      "The service cannot carry out requests now",
}

// problemHeaders are the header fields a problem's record keeps, whatever
// WithResponseHeaders says.
var problemHeaders = []string{"Cache-Control", "Content-Type", "Link"}

func (m *Middleware[TTx]) problem(w http.ResponseWriter, status int, code, detail string) {
	if m.keyHeader != Header {
		// The texts name the field the client sends (WithKeyHeader).
		detail = strings.ReplaceAll(detail, Header, m.keyHeader)
	}
	p := Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code}
	h := w.Header()
	if m.docs != "" {
		p.Type = m.docs + "#" + code
		p.Title = titles[code]
		if m.keyHeader != Header {
			p.Title = strings.ReplaceAll(p.Title, Header, m.keyHeader)
		}
		// The draft's alternative to a body link: a Link header pointing at
		// the documentation.
		h.Set("Link", "<"+m.docs+`>; rel="describedby"; type="text/html"`)
	}
	body, _ := json.Marshal(p) // strings and ints only: cannot fail
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	// A problem answers this attempt only; caches must not keep it.
	h.Set("Cache-Control", "no-store")
	switch code {
	case CodeInProgress:
		h.Set("Retry-After", "1")
	case CodeUnavailable:
		h.Set("Retry-After", unavailableRetryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (m *Middleware[TTx]) inProgress(w http.ResponseWriter) {
	m.problem(w, http.StatusConflict, CodeInProgress, "a request with this Idempotency-Key is still being processed; retry it unchanged later")
}

func (m *Middleware[TTx]) reused(w http.ResponseWriter) {
	m.problem(w, m.reuseStatus, CodeKeyReused, "this Idempotency-Key was used with a different request; use a new key for a new request")
}

const (
	notDone      = "the request was not carried out; retry it with the same Idempotency-Key"
	notRecords   = "the request was carried out but its response could not be recorded"
	tooLargeTx   = "the answer is larger than this server records; the request was not carried out"
	tooLargeDone = "the request was carried out but its answer is larger than this server records"
	unknownTx    = "the outcome of the request is unknown: the connection to the database was lost while it committed; send it again unchanged, with the same Idempotency-Key, to get its answer"
	unknownNoKey = "the outcome of the request is unknown: the connection to the database was lost while it committed, and the request carried no Idempotency-Key to ask again with"
	readOnly     = "the service cannot carry out requests now; the request was not carried out: retry it later with the same Idempotency-Key"
	unfinished   = "the request stopped part-way; send it again unchanged, with the same Idempotency-Key, to finish it"
	givenUp      = "the request could not be finished and was given up; part of it may have been carried out"
)

// unavailableRetryAfter is the Retry-After of CodeUnavailable, in
// seconds: about the time a tuned automatic failover takes to promote a
// standby.
const unavailableRetryAfter = "5"

// refused answers a request whose key the store refused for the way the
// database is set up (idem.Refused): 500, not carried out, and the detail
// says that sending it again will not help and what the server needs,
// never to retry. err is reported with the fix.
func (m *Middleware[TTx]) refused(w http.ResponseWriter, r *http.Request, err error) {
	m.onError(r, idem.RefusedError(err, "httpidem"))
	m.problem(w, http.StatusInternalServerError, CodeInternal, idem.RefusedDetail(err, "request", "Idempotency-Key"))
}

func (m *Middleware[TTx]) internal(w http.ResponseWriter, r *http.Request, err error, detail string) {
	m.onError(r, err)
	m.problem(w, http.StatusInternalServerError, CodeInternal, detail)
}

// tooLarge answers a handler's answer that cannot be recorded, in
// transactional mode (the work rolled back).
func (m *Middleware[TTx]) tooLarge(w http.ResponseWriter, r *http.Request, err error) {
	m.onError(r, err)
	m.problem(w, http.StatusInternalServerError, CodeResponseTooLarge, tooLargeTx)
}

// unavailable answers a request whose writes the database refused because
// it takes none: not carried out. The error goes to the error log: an
// operator needs to know that the application is routed to a server that
// is not the primary.
func (m *Middleware[TTx]) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	m.onError(r, err)
	m.problem(w, http.StatusServiceUnavailable, CodeUnavailable, readOnly)
}

// unknown answers a request whose transaction may or may not have
// committed.
func (m *Middleware[TTx]) unknown(w http.ResponseWriter, r *http.Request, err error, keyed bool) {
	m.onError(r, err)
	detail := unknownTx
	if !keyed {
		detail = unknownNoKey
	}
	m.problem(w, http.StatusInternalServerError, CodeOutcomeUnknown, detail)
}
