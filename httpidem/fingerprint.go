package httpidem

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sqlonce/sqlonce/dedupe"
)

// FingerprintFunc returns the part of a request's fingerprint that the
// application chooses (WithFingerprint), from the request and its body as
// read (r.Body is not to be read). Two requests with one key whose results
// differ are two requests: the second is answered 422. The method, the
// route and the fields named with WithFingerprintHeaders count as well.
type FingerprintFunc func(r *http.Request, body []byte) ([]byte, error)

// FingerprintJSON is a FingerprintFunc for JSON APIs: the path, the query
// and the body as canonical JSON (dedupe.FingerprintJSON), so that the
// order of object keys and insignificant white space do not make a retry
// a different request. An empty body counts as no body; one that is not
// JSON is an error (400).
func FingerprintJSON(r *http.Request, body []byte) ([]byte, error) {
	canon := []byte(nil)
	if len(bytes.TrimSpace(body)) > 0 {
		var err error
		if canon, err = dedupe.FingerprintJSON(json.RawMessage(body)); err != nil {
			return nil, err
		}
	}
	return dedupe.Fingerprint([]byte(r.URL.EscapedPath()), []byte(r.URL.RawQuery), canon), nil
}

// fingerprint hashes what makes two requests with one key the same
// request: method, route, path, query, body and the configured header
// fields. A key names one request, so the same key sent to another method
// or route is a reuse (422), not a new request.
func (m *Middleware[TTx]) fingerprint(r *http.Request, body []byte) ([]byte, error) {
	parts := [][]byte{[]byte(r.Method), []byte(m.route(r))}
	if m.options.fingerprint != nil {
		fp, err := m.options.fingerprint(r, body)
		if err != nil {
			return nil, err
		}
		// Tagged, so that no choice of fp's result spells the default's.
		parts = append(parts, []byte("fn"), fp)
	} else {
		parts = append(parts, []byte(r.URL.EscapedPath()), []byte(r.URL.RawQuery), body)
	}
	for _, h := range m.fpHeaders {
		parts = append(parts, []byte(h), []byte(strings.Join(r.Header.Values(h), "\n")))
	}
	return dedupe.Fingerprint(parts...), nil
}
