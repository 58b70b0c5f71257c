package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// sqliteOneWriter is why a case that needs a duplicate answered 409 while
// the first request's transaction is open cannot run on SQLite.
const sqliteOneWriter = "SQLite runs one writing transaction at a time: in transactional mode a duplicate waits at BEGIN for the first request's transaction and then gets the replay, it is never told 409"

// httpSrv is an httptest.Server with the middleware in front of an orders
// handler that writes one ledger row per run and answers 201 with random
// bytes, so that a replay can only equal the first answer by being it.
type httpSrv[TTx any] struct {
	db    harness.DB[TTx]
	url   string
	lease bool // lease mode (set by the mode's cases)
	// runs counts handler runs, rolled back or not.
	runs atomic.Int64
	// now, when set, pins the database clock for the requests.
	now atomic.Pointer[time.Time]
	// hook runs after the ledger write and returns the status to answer
	// (0: 201). It may block or panic.
	hook func(w http.ResponseWriter, r *http.Request) int
	// errs collects what the middleware reports through WithErrorLog.
	mu   sync.Mutex
	errs []error
}

// httpMode builds a Middleware in one mode: httpidem.New[TTx], leased,
// or withTxFunc's.
type httpMode[TTx any] func(d sqlonce.Driver[TTx], principal func(*http.Request) string, opts ...httpidem.Option) (*httpidem.Middleware[TTx], error)

// leased is lease mode, with a lease of a minute.
func leased[TTx any](d sqlonce.Driver[TTx], principal func(*http.Request) string, opts ...httpidem.Option) (*httpidem.Middleware[TTx], error) {
	return httpidem.NewLeased(d, principal, time.Minute, opts...)
}

// withTxFunc is transactional mode on run's transactions.
func withTxFunc[TTx any](run httpidem.TxFunc[TTx]) httpMode[TTx] {
	return func(d sqlonce.Driver[TTx], principal func(*http.Request) string, opts ...httpidem.Option) (*httpidem.Middleware[TTx], error) {
		return httpidem.NewWithTxFunc(d, principal, run, opts...)
	}
}

// startHTTP starts the orders server in transactional mode.
func startHTTP[TTx any](t *testing.T, db harness.DB[TTx], hook func(w http.ResponseWriter, r *http.Request) int, opts ...httpidem.Option) *httpSrv[TTx] {
	t.Helper()
	return startHTTPOn(t, db, hook, httpidem.New[TTx], opts...)
}

// startHTTPOn starts the orders server with a Middleware that mode builds.
func startHTTPOn[TTx any](t *testing.T, db harness.DB[TTx], hook func(w http.ResponseWriter, r *http.Request) int, mode httpMode[TTx], opts ...httpidem.Option) *httpSrv[TTx] {
	t.Helper()
	s := &httpSrv[TTx]{db: db, hook: hook}
	opts = append([]httpidem.Option{httpidem.WithErrorLog(func(r *http.Request, err error) {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	})}, opts...)
	m, err := mode(db.Driver(), func(r *http.Request) string { return r.Header.Get("X-User") }, opts...)
	must(t, err)
	mux := http.NewServeMux()
	mux.Handle("/orders/", m.Wrap(http.HandlerFunc(s.order)))
	mux.Handle("/refunds/", m.Wrap(http.HandlerFunc(s.order)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if now := s.now.Load(); now != nil {
			r = r.WithContext(testclock.With(r.Context(), *now))
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// order is the business handler: the ledger row is its effect, ref from
// X-Ref (default "order").
func (s *httpSrv[TTx]) order(w http.ResponseWriter, r *http.Request) {
	s.runs.Add(1)
	ctx := r.Context()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ref := r.Header.Get("X-Ref")
	if ref == "" {
		ref = "order"
	}
	if _, leased := httpidem.LeaseFrom(ctx); leased {
		// Lease mode: the effect is outside the key's transaction.
		err = s.db.Pool().LedgerInsert(ctx, ref, 1)
	} else if tx, ok := httpidem.TxFrom[TTx](ctx); ok {
		err = s.db.Tx(tx).LedgerInsert(ctx, ref, 1)
	} else {
		err = errors.New("no transaction and no lease")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	status := http.StatusCreated
	if s.hook != nil {
		if st := s.hook(w, r); st != 0 {
			status = st
		}
	}
	nonce := make([]byte, 32)
	_, _ = rand.Read(nonce)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Location", fmt.Sprintf("/orders/%x", nonce[:4]))
	w.Header().Set("ETag", fmt.Sprintf(`"%x"`, nonce[8:12]))
	w.Header().Set("X-Trace", fmt.Sprintf("%x", nonce[4:8])) // not recorded
	w.WriteHeader(status)
	_, _ = w.Write(append(nonce, body...))
}

func (s *httpSrv[TTx]) middlewareErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// oneShot is a client that never reuses a connection. Go's transport
// sends a request that carries an Idempotency-Key again, by itself, when a
// reused connection breaks before the answer; a case that wants to see the
// broken attempt must not let it.
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// reply is what a client got.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get(httpidem.ReplayHeader) == "true" }

// problem decodes an RFC 9457 body and checks its media type and status.
func (r reply) problem(t testing.TB) httpidem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d: Content-Type %q, want application/problem+json (body %q)", r.status, ct, r.body)
	}
	var p httpidem.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" || p.Code == "" {
		t.Fatalf("problem %+v for status %d", p, r.status)
	}
	return p
}

// req describes a request: keys are raw Idempotency-Key field lines.
type req struct {
	method, path, user, body, ref string
	keys                          []string
	header                        http.Header
	chunked                       bool
}

// quoted is a key as a Structured Field String.
func quoted(key string) []string { return []string{`"` + key + `"`} }

// newUUIDv4 is a random UUID version 4, as Stripe's clients send.
func newUUIDv4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// newULID is a ULID: 48 bits of milliseconds and 80 random bits in
// Crockford's base 32, 26 characters.
func newULID() string {
	const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	_, _ = rand.Read(b[6:])
	// 128 bits as 26 digits of 5 bits, the first holding the top 3 bits.
	out := make([]byte, 26)
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// randomToken is n random bytes in unpadded base64url.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *httpSrv[TTx]) send(ctx context.Context, client *http.Client, q req) (reply, error) {
	if q.method == "" {
		q.method = http.MethodPost
	}
	if q.path == "" {
		q.path = "/orders/"
	}
	var body io.Reader = strings.NewReader(q.body)
	if q.chunked {
		body = io.MultiReader(strings.NewReader(q.body)) // length unknown: sent chunked
	}
	hr, err := http.NewRequestWithContext(ctx, q.method, s.url+q.path, body)
	if err != nil {
		return reply{}, err
	}
	for k, vs := range q.header {
		hr.Header[k] = vs
	}
	if q.user != "" {
		hr.Header.Set("X-User", q.user)
	}
	if q.ref != "" {
		hr.Header.Set("X-Ref", q.ref)
	}
	for _, k := range q.keys {
		hr.Header.Add(httpidem.Header, k)
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hr)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (s *httpSrv[TTx]) mustSend(t testing.TB, q req) reply {
	t.Helper()
	r, err := s.send(ctxT(t), nil, q)
	must(t, err)
	return r
}

func wantHTTPStatus(t testing.TB, what string, r reply, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d (body %q)", what, r.status, status, r.body)
	}
}

// sameAnswer fails unless b replays a byte for byte: status, recorded
// headers, body.
func sameAnswer(t testing.TB, what string, a, b reply) {
	t.Helper()
	if !b.replayed() || a.replayed() {
		t.Fatalf("%s: replay marker first=%v repeat=%v", what, a.replayed(), b.replayed())
	}
	if b.status != a.status || !bytes.Equal(b.body, a.body) {
		t.Fatalf("%s: repeat (%d, %x), want first (%d, %x)", what, b.status, b.body, a.status, a.body)
	}
	for _, h := range []string{"Content-Type", "Location", "Etag", "Content-Length"} {
		if b.header.Get(h) != a.header.Get(h) {
			t.Fatalf("%s: %s %q, want %q", what, h, b.header.Get(h), a.header.Get(h))
		}
	}
}

func runHTTPIdem[TTx any](t *testing.T, f harness.Factory[TTx]) {
	part(t, "Tx", func(t *testing.T) { runHTTPIdemMode(t, f, false) })
	part(t, "Lease", func(t *testing.T) { runHTTPIdemMode(t, f, true) })
	t.Run("Tx/InProgress409", func(t *testing.T) { httpTxInProgress(t, f) })
	t.Run("Tx/RecordedWithTheBusinessWrite", func(t *testing.T) { httpTxAtomic(t, f) })
	t.Run("Tx/NoKeyStillTransactional", func(t *testing.T) { httpTxNoKey(t, f) })
	t.Run("Tx/TxFunc", func(t *testing.T) { httpTxFunc(t, f) })
	t.Run("Tx/RetriesWhatTheDatabaseRefuses", func(t *testing.T) { httpTxRetry(t, f) })
	t.Run("Lease/InProgressAndRelease", func(t *testing.T) { httpLease(t, f) })
	t.Run("Tx/OutcomeUnknownAfterCommit", func(t *testing.T) { httpTxOutcomeUnknown(t, f) })
	t.Run("Tx/RolledBackByTheDatabase", func(t *testing.T) { httpTxRolledBack(t, f) })
	t.Run("Tx/InspectForget", func(t *testing.T) { httpInspectForget(t, f) })
}

// runHTTPIdemMode runs the cases both modes share.
func runHTTPIdemMode[TTx any](t *testing.T, f harness.Factory[TTx], lease bool) {
	startHTTP := func(t *testing.T, db harness.DB[TTx], hook func(w http.ResponseWriter, r *http.Request) int, opts ...httpidem.Option) *httpSrv[TTx] {
		t.Helper()
		mode := httpidem.New[TTx]
		if lease {
			mode = leased[TTx]
		}
		s := startHTTPOn(t, db, hook, mode, opts...)
		s.lease = lease
		return s
	}
	with := func(opts ...httpidem.Option) []httpidem.Option { return opts }

	t.Run("ReplayByteForByte", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with()...)
		q := req{user: "alice", keys: quoted("8e03978e-40d5-43e8-bc93-6894a57f9324"), body: "\x00{\"amount\":100}\xff"}
		first := s.mustSend(t, q)
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		if first.header.Get("X-Trace") == "" || !bytes.HasSuffix(first.body, []byte(q.body)) {
			t.Fatalf("first answer %v %q is not the handler's", first.header, first.body)
		}
		for i := range 3 {
			again := s.mustSend(t, q)
			sameAnswer(t, fmt.Sprintf("repeat %d", i), first, again)
			if again.header.Get("X-Trace") != "" {
				t.Fatal("a header outside the recorded set was replayed")
			}
		}
		// The same key in another form on the wire is the same key.
		again := s.mustSend(t, req{user: "alice", keys: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324";v=1 `}, body: q.body})
		sameAnswer(t, "with a parameter", first, again)
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("MissingAndInvalidKey400", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithDocs("https://api.example.com/docs/idempotency"))...)
		r := s.mustSend(t, req{user: "alice", body: "x"})
		wantHTTPStatus(t, "missing", r, http.StatusBadRequest)
		p := r.problem(t)
		if p.Code != httpidem.CodeKeyMissing || p.Type != "https://api.example.com/docs/idempotency#"+httpidem.CodeKeyMissing ||
			!strings.Contains(r.header.Get("Link"), `rel="describedby"`) {
			t.Fatalf("missing key problem %+v, Link %q", p, r.header.Get("Link"))
		}
		for name, keys := range map[string][]string{
			"two fields":      {`"a"`, `"b"`},
			"a list":          {`"a", "b"`},
			"a bare list":     {`a,b`},
			"bare with space": {`a b`},
			"bare not ascii":  {`ключ`},
			"empty":           {`""`},
			"too long":        quoted(strings.Repeat("k", sqlonce.MaxKeyLen+1)),
			"bare too long":   {strings.Repeat("k", sqlonce.MaxKeyLen+1)},
			"unterminate":     {`"abc`},
		} {
			r := s.mustSend(t, req{user: "alice", keys: keys, body: "x"})
			wantHTTPStatus(t, name, r, http.StatusBadRequest)
			if p := r.problem(t); p.Code != httpidem.CodeKeyInvalid {
				t.Fatalf("%s: code %q", name, p.Code)
			}
		}
		// The longest key is fine.
		wantHTTPStatus(t, "255 bytes", s.mustSend(t, req{user: "alice", keys: quoted(strings.Repeat("k", sqlonce.MaxKeyLen)), body: "x"}), http.StatusCreated)
		// Methods the middleware does not handle pass through untouched.
		if r := s.mustSend(t, req{method: http.MethodGet, user: "alice"}); r.status != http.StatusInternalServerError || !bytes.Contains(r.body, []byte("no transaction and no lease")) {
			t.Fatalf("GET: %d %q, want the handler's own answer", r.status, r.body)
		}
		if n := s.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2 (the 255-byte key and the GET)", n)
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("KeysAsClientsSendThem", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with()...)
		// What client libraries put in the field: most send the key bare
		// (Stripe's a UUID v4), a few as the draft's quoted String. Each is
		// replayed when sent again in either form: k and "k" are one key.
		for _, wire := range []string{
			newUUIDv4(),                            // Stripe-style
			newULID(),                              // ULID
			randomToken(32),                        // base64url, 43 characters
			`"` + newUUIDv4() + `"`,                // the draft's sf-string
			strings.Repeat("k", sqlonce.MaxKeyLen), // the longest bare key
		} {
			body := "order " + wire
			first := s.mustSend(t, req{user: "alice", keys: []string{wire}, body: body})
			wantHTTPStatus(t, wire, first, http.StatusCreated)
			sameAnswer(t, wire+" again", first, s.mustSend(t, req{user: "alice", keys: []string{wire}, body: body}))
			other := `"` + wire + `"`
			if strings.HasPrefix(wire, `"`) {
				other = strings.Trim(wire, `"`)
			}
			sameAnswer(t, wire+" as "+other, first, s.mustSend(t, req{user: "alice", keys: []string{other}, body: body}))
			// Reuse is told apart from a replay in the bare form too.
			r := s.mustSend(t, req{user: "alice", keys: []string{other}, body: "another order"})
			wantHTTPStatus(t, other+" reused", r, http.StatusUnprocessableEntity)
			if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
				t.Fatalf("%s reused: code %q", other, p.Code)
			}
		}
		// Bare values an RFC 9651 parser (a proxy) reads as something else
		// than the key: refused, to be quoted.
		for _, wire := range []string{`k;a=1`, `?1`, `:YWJj:`} {
			r := s.mustSend(t, req{user: "alice", keys: []string{wire}, body: "x"})
			wantHTTPStatus(t, "bare "+wire, r, http.StatusBadRequest)
			if p := r.problem(t); p.Code != httpidem.CodeKeyInvalid || !strings.Contains(p.Detail, "quote it") {
				t.Fatalf("bare %s: problem %+v", wire, p)
			}
		}
		if n := s.runs.Load(); n != 5 {
			t.Fatalf("handler ran %d times, want 5", n)
		}
		ddLedger(t, db, "order", 5)
	})

	t.Run("StrictKeyRefusesBare400", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithStrictKey())...)
		key := newUUIDv4()
		for _, wire := range []string{key, newULID(), randomToken(32)} {
			r := s.mustSend(t, req{user: "alice", keys: []string{wire}, body: "x"})
			wantHTTPStatus(t, "bare "+wire, r, http.StatusBadRequest)
			if p := r.problem(t); p.Code != httpidem.CodeKeyInvalid || !strings.Contains(p.Detail, "Structured Field String") {
				t.Fatalf("bare %s: problem %+v", wire, p)
			}
		}
		first := s.mustSend(t, req{user: "alice", keys: quoted(key), body: "x"})
		wantHTTPStatus(t, "quoted", first, http.StatusCreated)
		sameAnswer(t, "quoted again", first, s.mustSend(t, req{user: "alice", keys: quoted(key), body: "x"}))
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("KeyReuse422", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithFingerprintHeaders("Content-Type"))...)
		json := http.Header{"Content-Type": {"application/json"}}
		q := req{user: "alice", keys: quoted("k1"), body: `{"amount":100}`, header: json}
		first := s.mustSend(t, q)
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		for name, other := range map[string]req{
			"other body":         {user: "alice", keys: quoted("k1"), body: `{"amount":999}`, header: json},
			"other query":        {user: "alice", keys: quoted("k1"), body: q.body, header: json, path: "/orders/?dry=1"},
			"other path":         {user: "alice", keys: quoted("k1"), body: q.body, header: json, path: "/orders/2"},
			"other content type": {user: "alice", keys: quoted("k1"), body: q.body, header: http.Header{"Content-Type": {"text/plain"}}},
		} {
			r := s.mustSend(t, other)
			wantHTTPStatus(t, name, r, http.StatusUnprocessableEntity)
			if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
				t.Fatalf("%s: code %q", name, p.Code)
			}
		}
		// A header outside the fingerprint does not matter.
		q2 := q
		q2.header = http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"other"}}
		sameAnswer(t, "same request", first, s.mustSend(t, q2))
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("KeyReuseAcrossMethodAndRoute422", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with()...)
		first := s.mustSend(t, req{path: "/orders/7", user: "alice", keys: quoted("k1"), body: "x"})
		wantHTTPStatus(t, "POST /orders/7", first, http.StatusCreated)
		// A key names one request: the same caller sending it to another
		// method or route is refused, not run as a new request.
		for name, other := range map[string]req{
			"PATCH /orders/7": {method: http.MethodPatch, path: "/orders/7", user: "alice", keys: quoted("k1"), body: "x"},
			"POST /refunds/7": {path: "/refunds/7", user: "alice", keys: quoted("k1"), body: "x"},
		} {
			r := s.mustSend(t, other)
			wantHTTPStatus(t, name, r, http.StatusUnprocessableEntity)
			if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
				t.Fatalf("%s: code %q", name, p.Code)
			}
		}
		sameAnswer(t, "the first request again", first, s.mustSend(t, req{path: "/orders/7", user: "alice", keys: quoted("k1"), body: "x"}))
		// Another caller's key of the same spelling is another key.
		wantHTTPStatus(t, "bob on another route", s.mustSend(t, req{path: "/refunds/7", user: "bob", keys: quoted("k1"), body: "x"}), http.StatusCreated)
		if n := s.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
		ddLedger(t, db, "order", 2)
	})

	t.Run("MaxResponseSizeCountsTheBody", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithMaxResponseSize(256))...)
		// The handler answers 32 random bytes and the request body, with
		// Content-Type, Location and ETag recorded beside it: a 256-byte
		// body fits, headers or not.
		fits := req{user: "alice", ref: "fits", keys: quoted("fits"), body: strings.Repeat("b", 256-32)}
		first := s.mustSend(t, fits)
		wantHTTPStatus(t, "256-byte body", first, http.StatusCreated)
		if len(first.body) != 256 {
			t.Fatalf("body of %d bytes", len(first.body))
		}
		sameAnswer(t, "256-byte body again", first, s.mustSend(t, fits))
		ddLedger(t, db, "fits", 1)

		big := req{user: "alice", ref: "big", keys: quoted("big"), body: strings.Repeat("b", 257-32)}
		r := s.mustSend(t, big)
		wantHTTPStatus(t, "257-byte body", r, http.StatusInternalServerError)
		if p := r.problem(t); p.Code != httpidem.CodeResponseTooLarge {
			t.Fatalf("257-byte body: code %q", p.Code)
		}
		again := s.mustSend(t, big)
		if s.lease {
			// The work was done: its key replays the problem, and the
			// work is not done again.
			if !again.replayed() || again.status != http.StatusInternalServerError || !bytes.Equal(again.body, r.body) {
				t.Fatalf("repeat of a done request: %d replayed=%v %q", again.status, again.replayed(), again.body)
			}
			ddLedger(t, db, "big", 1)
		} else {
			// Rolled back, key free: the repeat runs (and fails) again.
			if again.replayed() || again.problem(t).Code != httpidem.CodeResponseTooLarge {
				t.Fatalf("repeat of a rolled-back request: %d replayed=%v %q", again.status, again.replayed(), again.body)
			}
			ddLedger(t, db, "big", 0)
		}
		if len(s.middlewareErrors()) == 0 {
			t.Fatal("an answer too large to record was not reported to the error log")
		}
	})

	t.Run("HeaderValuesBeyondTheRecord", func(t *testing.T) {
		db := f(t, 0)
		var many atomic.Bool
		many.Store(true)
		s := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
			if many.Load() {
				links := make([]string, 1<<16) // one more than a record counts
				for i := range links {
					links[i] = "</x>"
				}
				w.Header()["Link"] = links
			}
			return 0
		}, with(httpidem.WithResponseHeaders("Content-Type", "Location", "ETag", "Link"))...)
		q := req{user: "alice", keys: quoted("links"), body: "8 bytes!"}
		r := s.mustSend(t, q)
		wantHTTPStatus(t, "65,536 Link values", r, http.StatusInternalServerError)
		if p := r.problem(t); p.Code != httpidem.CodeResponseTooLarge {
			t.Fatalf("code %q", p.Code)
		}
		again := s.mustSend(t, q)
		if s.lease {
			// Done once; its key replays the problem, never a corrupted
			// record (one value and the rest as body).
			if !again.replayed() || !bytes.Equal(again.body, r.body) {
				t.Fatalf("repeat: %d replayed=%v %d bytes", again.status, again.replayed(), len(again.body))
			}
			ddLedger(t, db, "order", 1)
		} else {
			if again.replayed() || again.status != http.StatusInternalServerError {
				t.Fatalf("repeat: %d replayed=%v %d bytes", again.status, again.replayed(), len(again.body))
			}
			ddLedger(t, db, "order", 0)
			many.Store(false)
			ok := s.mustSend(t, q)
			wantHTTPStatus(t, "with one Link value less", ok, http.StatusCreated)
			sameAnswer(t, "replay", ok, s.mustSend(t, q))
			ddLedger(t, db, "order", 1)
		}
	})

	t.Run("WaitInsteadOf409", func(t *testing.T) {
		db := f(t, 6)
		holding, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
			if r.Header.Get("X-Ref") == "slow" {
				once.Do(func() { close(holding); <-release })
			}
			return 0
		}, with(httpidem.WithWait(5*time.Second))...)
		q := req{user: "alice", ref: "slow", keys: quoted("wait-1"), body: "x"}
		firstc := make(chan reply, 1)
		go func() {
			r, err := s.send(ctxT(t), nil, q)
			if err != nil {
				t.Error(err)
			}
			firstc <- r
		}()
		select {
		case <-holding:
		case r := <-firstc:
			t.Fatalf("the first request ended (%d %q) before its handler ran", r.status, r.body)
		}
		dupc := make(chan reply, 1)
		go func() {
			r, err := s.send(ctxT(t), nil, q)
			if err != nil {
				t.Error(err)
			}
			dupc <- r
		}()
		time.Sleep(300 * time.Millisecond) // the duplicate arrives while the first runs
		close(release)
		first, dup := <-firstc, <-dupc
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		// Held until the first ended, then given its answer, not 409.
		sameAnswer(t, "waiting duplicate", first, dup)
		ddLedger(t, db, "slow", 1)

		if db.Dialect() == "sqlite" && !s.lease {
			return // a duplicate waits at BEGIN for busy_timeout, not for WithWait
		}
		// Past the bound: 409.
		hold2, release2 := make(chan struct{}), make(chan struct{})
		s2 := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
			if r.Header.Get("X-Ref") == "stuck" {
				close(hold2)
				<-release2
			}
			return 0
		}, with(httpidem.WithWait(time.Second))...)
		q2 := req{user: "alice", ref: "stuck", keys: quoted("wait-2"), body: "x"}
		go func() {
			r, err := s2.send(ctxT(t), nil, q2)
			if err != nil {
				t.Error(err)
			}
			firstc <- r
		}()
		<-hold2
		q2.ref = "dup" // the handler must not block if it ran (it must not)
		late := s2.mustSend(t, q2)
		wantHTTPStatus(t, "past the wait", late, http.StatusConflict)
		if late.problem(t).Code != httpidem.CodeInProgress {
			t.Fatalf("past the wait: %q", late.body)
		}
		close(release2)
		wantHTTPStatus(t, "stuck first", <-firstc, http.StatusCreated)
		ddLedger(t, db, "stuck", 1)
		ddLedger(t, db, "dup", 0)
	})

	t.Run("FingerprintJSON", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithFingerprint(httpidem.FingerprintJSON))...)
		q := req{user: "alice", keys: quoted("j1"), body: `{"amount":100,"currency":"EUR"}`}
		first := s.mustSend(t, q)
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		// Key order and white space do not make another request.
		sameAnswer(t, "reordered", first, s.mustSend(t, req{user: "alice", keys: quoted("j1"), body: "{ \"currency\": \"EUR\",\n \"amount\": 100 }"}))
		for name, other := range map[string]req{
			"other amount": {user: "alice", keys: quoted("j1"), body: `{"amount":101,"currency":"EUR"}`},
			"other path":   {path: "/orders/9", user: "alice", keys: quoted("j1"), body: q.body},
			"other method": {method: http.MethodPatch, user: "alice", keys: quoted("j1"), body: q.body},
		} {
			wantHTTPStatus(t, name, s.mustSend(t, other), http.StatusUnprocessableEntity)
		}
		r := s.mustSend(t, req{user: "alice", keys: quoted("j2"), body: "amount=100"})
		wantHTTPStatus(t, "not JSON", r, http.StatusBadRequest)
		if r.problem(t).Code != httpidem.CodeBodyUnreadable {
			t.Fatalf("not JSON: %q", r.body)
		}
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("ReplayHook", func(t *testing.T) {
		db := f(t, 0)
		var replays atomic.Int64
		s := startHTTP(t, db, nil, with(httpidem.WithReplayHook(func(r *http.Request, rep *httpidem.Replay) {
			replays.Add(1)
			rep.Header.Set("X-Replay-Of", r.Header.Get(httpidem.Header))
		}))...)
		q := req{user: "alice", keys: quoted("h1"), body: "x"}
		first := s.mustSend(t, q)
		if first.header.Get("X-Replay-Of") != "" || replays.Load() != 0 {
			t.Fatal("the hook ran for a first answer")
		}
		for i := range 2 {
			again := s.mustSend(t, q)
			sameAnswer(t, "replay", first, again)
			if again.header.Get("X-Replay-Of") != `"h1"` || replays.Load() != int64(i+1) {
				t.Fatalf("replay %d: X-Replay-Of %q, hook calls %d", i, again.header.Get("X-Replay-Of"), replays.Load())
			}
		}
		ddLedger(t, db, "order", 1)
	})

	t.Run("ConcurrentClientsSameKey", func(t *testing.T) {
		db := f(t, Racers+4)
		if db.Dialect() != "sqlite" { // a file: nothing to connect to
			warm(t, db, Racers+4)
		}
		s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int {
			time.Sleep(50 * time.Millisecond) // keep the first request in flight
			return 0
		}, with()...)
		q := req{user: "alice", keys: quoted("pay-1"), body: "amount=100"}
		replies := make([]reply, Racers)
		noErrors(t, race(Racers, func(i int) error {
			var err error
			replies[i], err = s.send(ctxT(t), nil, q)
			return err
		}))
		var firsts, conflicts, replays int
		var first reply
		for _, r := range replies {
			switch {
			case r.status == http.StatusCreated && !r.replayed():
				firsts++
				first = r
			case r.status == http.StatusCreated:
				replays++
			case r.status == http.StatusConflict:
				conflicts++
				if r.problem(t).Code != httpidem.CodeInProgress || r.header.Get("Retry-After") == "" {
					t.Fatalf("409 without its problem or Retry-After: %v %q", r.header, r.body)
				}
			default:
				t.Fatalf("status %d: %q (middleware errors %v)", r.status, r.body, s.middlewareErrors())
			}
		}
		if firsts != 1 {
			t.Fatalf("%d first answers, want 1 (%d replays, %d conflicts)", firsts, replays, conflicts)
		}
		for _, r := range replies {
			if r.replayed() {
				sameAnswer(t, "concurrent replay", first, r)
			}
		}
		sameAnswer(t, "after the race", first, s.mustSend(t, q))
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1)
		t.Logf("1 first answer, %d replays, %d conflicts", replays, conflicts)
	})

	t.Run("RetryAfterClientTimeout", func(t *testing.T) {
		db := f(t, 0)
		release, slow := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
			once.Do(func() { close(slow); <-release }) // only the first attempt is slow
			return 0
		}, with()...)
		q := req{user: "alice", keys: quoted("slow-1"), body: "x"}
		// The client gives up once the handler is in its slow part: a
		// fixed client timeout could end the request before the handler
		// ran at all, on a loaded machine, which is another case.
		impatient, giveUp := context.WithCancel(ctxT(t))
		go func() { <-slow; giveUp() }()
		if _, err := s.send(impatient, http.DefaultClient, q); err == nil {
			t.Fatal("the first attempt did not time out")
		}
		close(release)
		// The client retries until it gets an answer. The first attempt
		// either finished on the server (the retry replays it) or was
		// rolled back when its client went away (the retry runs it).
		var got reply
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := s.mustSend(t, q)
			if r.status != http.StatusConflict {
				got = r
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("still 409 after 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		wantHTTPStatus(t, "retry", got, http.StatusCreated)
		again := s.mustSend(t, q)
		if got.replayed() {
			if again.status != got.status || !bytes.Equal(again.body, got.body) || !again.replayed() {
				t.Fatalf("two replays differ: %q, %q", got.body, again.body)
			}
		} else {
			sameAnswer(t, "after the retry", got, again)
		}
		// Exactly one run took effect, whatever the timing: in lease mode
		// the first attempt's effect stands and the retry replays it.
		ddLedger(t, db, "order", 1)
		t.Logf("retry replayed=%v, handler runs %d", got.replayed(), s.runs.Load())
	})

	t.Run("CrossPrincipalIsolation", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with()...)
		alice := s.mustSend(t, req{user: "alice", ref: "alice", keys: quoted("shared-key"), body: "same"})
		bob := s.mustSend(t, req{user: "bob", ref: "bob", keys: quoted("shared-key"), body: "same"})
		wantHTTPStatus(t, "alice", alice, http.StatusCreated)
		wantHTTPStatus(t, "bob", bob, http.StatusCreated)
		if bob.replayed() || bytes.Equal(alice.body, bob.body) {
			t.Fatal("bob got alice's answer")
		}
		sameAnswer(t, "alice again", alice, s.mustSend(t, req{user: "alice", ref: "alice", keys: quoted("shared-key"), body: "same"}))
		sameAnswer(t, "bob again", bob, s.mustSend(t, req{user: "bob", ref: "bob", keys: quoted("shared-key"), body: "same"}))
		// Bob reusing the key with another body hits only his own record.
		wantHTTPStatus(t, "bob reuse", s.mustSend(t, req{user: "bob", keys: quoted("shared-key"), body: "other"}), http.StatusUnprocessableEntity)
		// Without a principal the key cannot be scoped.
		r := s.mustSend(t, req{keys: quoted("shared-key"), body: "same"})
		wantHTTPStatus(t, "anonymous", r, http.StatusUnauthorized)
		if r.problem(t).Code != httpidem.CodeNoPrincipal {
			t.Fatalf("anonymous: %q", r.body)
		}
		ddLedger(t, db, "alice", 1)
		ddLedger(t, db, "bob", 1)
	})

	t.Run("RecordSuccessOnly", func(t *testing.T) {
		db := f(t, 0)
		var fail atomic.Bool
		fail.Store(true)
		s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int {
			if fail.Swap(false) {
				return http.StatusServiceUnavailable
			}
			return 0
		}, with(httpidem.WithRecord(httpidem.RecordSuccess))...)
		q := req{user: "alice", keys: quoted("k"), body: "x"}
		r := s.mustSend(t, q)
		wantHTTPStatus(t, "failing first run", r, http.StatusServiceUnavailable)
		if r.replayed() {
			t.Fatal("a first run marked as a replay")
		}
		ok := s.mustSend(t, q)
		wantHTTPStatus(t, "retry", ok, http.StatusCreated)
		if ok.replayed() {
			t.Fatal("the failure was recorded")
		}
		sameAnswer(t, "after success", ok, s.mustSend(t, q))
		if n := s.runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
		if s.lease {
			// The failed run's outside effect is not undone: what lease
			// mode cannot do, and why it records failures by default.
			ddLedger(t, db, "order", 2)
		} else {
			ddLedger(t, db, "order", 1) // the failed run rolled back
		}
	})

	t.Run("RecordAllReplaysErrors", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int { return http.StatusPaymentRequired }, with()...)
		q := req{user: "alice", keys: quoted("declined"), body: "card=4000000000000002"}
		first := s.mustSend(t, q)
		wantHTTPStatus(t, "declined", first, http.StatusPaymentRequired)
		sameAnswer(t, "declined again", first, s.mustSend(t, q))
		if n := s.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "order", 1) // committed with the recorded error
	})

	t.Run("FailRecordsNothing", func(t *testing.T) {
		db := f(t, 0)
		var fail atomic.Bool
		fail.Store(true)
		s := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
			if fail.Swap(false) {
				httpidem.Fail(r.Context(), errors.New("stock check failed"))
				return http.StatusConflict
			}
			return 0
		}, with()...) // RecordAll: only Fail keeps the 409 from being recorded
		q := req{user: "alice", keys: quoted("k"), body: "x"}
		r := s.mustSend(t, q)
		if r.status != http.StatusConflict || r.replayed() || r.header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("failed attempt: %d %v, want the handler's own 409", r.status, r.header)
		}
		ok := s.mustSend(t, q)
		if ok.status != http.StatusCreated || ok.replayed() {
			t.Fatalf("retry: %d replayed=%v", ok.status, ok.replayed())
		}
		sameAnswer(t, "after success", ok, s.mustSend(t, q))
		if s.lease {
			ddLedger(t, db, "order", 2) // the failed run's outside effect stays
		} else {
			ddLedger(t, db, "order", 1) // the failed run rolled back
		}
	})

	t.Run("BodyLimit413", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithMaxBody(16))...)
		for _, chunked := range []bool{false, true} {
			r := s.mustSend(t, req{user: "alice", keys: quoted(fmt.Sprint("big", chunked)), body: strings.Repeat("b", 17), chunked: chunked})
			wantHTTPStatus(t, fmt.Sprint("17 bytes, chunked=", chunked), r, http.StatusRequestEntityTooLarge)
			if r.problem(t).Code != httpidem.CodeBodyTooLarge {
				t.Fatalf("413 code %q", r.body)
			}
		}
		if n := s.runs.Load(); n != 0 {
			t.Fatalf("handler ran %d times for refused bodies", n)
		}
		// At the limit the handler reads the whole body.
		body := "0123456789abcdef"
		for _, chunked := range []bool{false, true} {
			r := s.mustSend(t, req{user: "alice", keys: quoted(fmt.Sprint("fits", chunked)), body: body, chunked: chunked})
			wantHTTPStatus(t, "16 bytes", r, http.StatusCreated)
			if !bytes.HasSuffix(r.body, []byte(body)) {
				t.Fatalf("handler read %q, want %q", r.body[32:], body)
			}
		}
		// A refused body left no key behind: the same key with a body that
		// fits runs.
		wantHTTPStatus(t, "key after 413", s.mustSend(t, req{user: "alice", keys: quoted("bigfalse"), body: "small"}), http.StatusCreated)
		ddLedger(t, db, "order", 3)
	})

	t.Run("NoRepeatSubmit", func(t *testing.T) {
		db := f(t, 0)
		s := startHTTP(t, db, nil, with(httpidem.WithNoRepeatSubmit(5*time.Second))...)
		t0 := clockBase()
		s.now.Store(&t0)
		form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
		a := req{user: "alice", ref: "a", body: "item=42&qty=1", header: form}
		first := s.mustSend(t, a)
		wantHTTPStatus(t, "first submit", first, http.StatusCreated)
		sameAnswer(t, "double click", first, s.mustSend(t, a))
		// Another body, another caller: other submits.
		wantHTTPStatus(t, "other body", s.mustSend(t, req{user: "alice", ref: "b", body: "item=42&qty=2", header: form}), http.StatusCreated)
		bob := s.mustSend(t, req{user: "bob", ref: "a", body: a.body, header: form})
		if bob.status != http.StatusCreated || bob.replayed() {
			t.Fatalf("bob's identical submit: %d replayed=%v", bob.status, bob.replayed())
		}
		// A client key still wins over the derived one.
		wantHTTPStatus(t, "with a key", s.mustSend(t, req{user: "alice", ref: "a", body: a.body, header: form, keys: quoted("explicit")}), http.StatusCreated)
		// Still within the window, then past it.
		almost := t0.Add(5*time.Second - time.Millisecond)
		s.now.Store(&almost)
		sameAnswer(t, "within the window", first, s.mustSend(t, a))
		after := t0.Add(5 * time.Second)
		s.now.Store(&after)
		later := s.mustSend(t, a)
		if later.status != http.StatusCreated || later.replayed() {
			t.Fatalf("after the window: %d replayed=%v", later.status, later.replayed())
		}
		ddLedger(t, db, "a", 4) // alice twice (window), bob, the explicit key
		ddLedger(t, db, "b", 1)
	})
}

// httpTxInProgress: while the first request's transaction holds the key,
// a duplicate is answered 409 at once, not held.
func httpTxInProgress[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 4)
	if db.Dialect() == "sqlite" {
		t.Skip(sqliteOneWriter)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int {
		once.Do(func() { close(holding); <-release })
		return 0
	})
	q := req{user: "alice", keys: quoted("pay-1"), body: "x"}
	firstc := make(chan reply, 1)
	go func() {
		r, err := s.send(ctxT(t), nil, q)
		if err != nil {
			t.Error(err)
		}
		firstc <- r
	}()
	// A first request that fails before its handler runs must fail the
	// test, not leave it waiting for a handler that never holds the key.
	select {
	case <-holding:
	case r := <-firstc:
		t.Fatalf("the first request ended (%d %q) before its handler ran", r.status, r.body)
	}
	start := time.Now()
	dup := s.mustSend(t, q)
	wantHTTPStatus(t, "duplicate in flight", dup, http.StatusConflict)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the duplicate waited %v", took)
	}
	if p := dup.problem(t); p.Code != httpidem.CodeInProgress {
		t.Fatalf("409 code %q", p.Code)
	}
	// Another body with the key in flight is in progress too: the record
	// to compare with is not committed yet.
	wantHTTPStatus(t, "other body in flight", s.mustSend(t, req{user: "alice", keys: quoted("pay-1"), body: "y"}), http.StatusConflict)
	close(release)
	first := <-firstc
	wantHTTPStatus(t, "first", first, http.StatusCreated)
	sameAnswer(t, "after", first, s.mustSend(t, q))
	ddLedger(t, db, "order", 1)
}

// httpTxAtomic: in transactional mode the key, the recorded response and
// the handler's writes commit together. A handler that panics after
// writing leaves neither; the retry runs it.
func httpTxAtomic[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	var crash atomic.Bool
	crash.Store(true)
	s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int {
		if crash.Swap(false) {
			panic(http.ErrAbortHandler) // after the ledger write
		}
		return 0
	})
	q := req{user: "alice", keys: quoted("crash-1"), body: "x"}
	if r, err := s.send(ctxT(t), oneShot, q); err == nil {
		t.Fatalf("a panicking handler answered %d", r.status)
	}
	ddLedger(t, db, "order", 0)
	ddKeys(t, db, 0)
	first := s.mustSend(t, q)
	wantHTTPStatus(t, "retry", first, http.StatusCreated)
	if first.replayed() {
		t.Fatal("replayed a crashed run")
	}
	sameAnswer(t, "repeat", first, s.mustSend(t, q))
	ddLedger(t, db, "order", 1)
	ddKeys(t, db, 1)
}

// httpTxNoKey: where the key is optional, a request without one still
// runs in a transaction the middleware commits (no replay).
func httpTxNoKey[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	s := startHTTP(t, db, func(http.ResponseWriter, *http.Request) int { return 0 },
		httpidem.WithRequired(func(r *http.Request) bool { return r.URL.Query().Get("strict") == "1" }))
	for range 2 {
		r := s.mustSend(t, req{user: "alice", body: "x"})
		if r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("no key: %d replayed=%v", r.status, r.replayed())
		}
	}
	wantHTTPStatus(t, "strict route", s.mustSend(t, req{user: "alice", body: "x", path: "/orders/?strict=1"}), http.StatusBadRequest)
	ddLedger(t, db, "order", 2)
	ddKeys(t, db, 0)
}

// httpTxFunc: a caller's own transaction runner (one for another
// transaction type does not compile).
func httpTxFunc[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	var runs atomic.Int64
	s := startHTTPOn(t, db, nil, withTxFunc(func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
		runs.Add(1)
		return harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error { return fn(ctx, tx) })
	}))
	q := req{user: "alice", keys: quoted("k"), body: "x"}
	first := s.mustSend(t, q)
	wantHTTPStatus(t, "first", first, http.StatusCreated)
	sameAnswer(t, "repeat", first, s.mustSend(t, q))
	if runs.Load() != 2 {
		t.Fatalf("tx func ran %d times, want 2", runs.Load())
	}
	ddLedger(t, db, "order", 1)
}

// httpLease: lease mode answers 409 while the lease holds (SQLite too:
// the lease is committed before the handler runs), releases the key for a
// response it does not record and for a panic, and hands the lease to the
// handler.
func httpLease[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 4)
	holding, release := make(chan struct{}), make(chan struct{})
	var step atomic.Int64
	var token atomic.Int64
	s := startHTTPOn(t, db, func(w http.ResponseWriter, r *http.Request) int {
		l, _ := httpidem.LeaseFrom(r.Context())
		token.Store(l.Token)
		switch step.Add(1) {
		case 1:
			close(holding)
			<-release
			return 0
		case 2:
			return http.StatusBadGateway // the provider failed: not recorded
		case 3:
			panic(http.ErrAbortHandler)
		}
		return 0
	}, leased[TTx], httpidem.WithRecord(httpidem.RecordSuccess))

	q := req{user: "alice", keys: quoted("charge-1"), body: "x"}
	firstc := make(chan reply, 1)
	go func() {
		r, err := s.send(ctxT(t), nil, q)
		if err != nil {
			t.Error(err)
		}
		firstc <- r
	}()
	// A first request that fails before its handler runs must fail the
	// test, not leave it waiting for a handler that never holds the key.
	select {
	case <-holding:
	case r := <-firstc:
		t.Fatalf("the first request ended (%d %q) before its handler ran", r.status, r.body)
	}
	wantHTTPStatus(t, "duplicate while leased", s.mustSend(t, q), http.StatusConflict)
	close(release)
	first := <-firstc
	wantHTTPStatus(t, "first", first, http.StatusCreated)
	if token.Load() == 0 {
		t.Fatal("the handler saw no lease token")
	}
	sameAnswer(t, "completed", first, s.mustSend(t, q))

	// A 502 is released, so is a panic: both retries run.
	q2 := req{user: "alice", ref: "charge-2", keys: quoted("charge-2"), body: "x"}
	wantHTTPStatus(t, "provider failed", s.mustSend(t, q2), http.StatusBadGateway)
	if _, err := s.send(ctxT(t), oneShot, q2); err == nil {
		t.Fatal("a panicking handler answered")
	}
	ok := s.mustSend(t, q2)
	wantHTTPStatus(t, "after release", ok, http.StatusCreated)
	if ok.replayed() {
		t.Fatal("a released key replayed")
	}
	sameAnswer(t, "charge-2 completed", ok, s.mustSend(t, q2))
	ddLedger(t, db, "order", 1)
	ddLedger(t, db, "charge-2", 3) // three runs: outside effects are not rolled back
	if errs := s.middlewareErrors(); len(errs) != 0 {
		t.Fatalf("middleware errors: %v", errs)
	}
}

// httpTxRetry: requests whose transactions conflict (each reads the rows
// the others insert, at SERIALIZABLE) are refused by the database with a
// serialization failure or a deadlock; the middleware runs them again,
// and every request gets its one answer with its one ledger row.
func httpTxRetry[TTx any](t *testing.T, f harness.Factory[TTx]) {
	const clients = 4
	db := f(t, 2*clients)
	if db.Dialect() == "sqlite" {
		t.Skip("SQLite runs writers one at a time: the key's claim takes the write lock before the handler reads, so the requests never conflict and there is nothing to retry")
	}
	s := &httpSrv[TTx]{db: db}
	var (
		attempts atomic.Int64
		arrived  atomic.Int64
		first    sync.Map // keys whose first attempt has run
	)
	m, err := httpidem.NewWithTxFunc(db.Driver(), func(r *http.Request) string { return r.Header.Get("X-User") },
		func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
			attempts.Add(1)
			return harness.WithTx(ctx, db, harness.Serializable, func(tx TTx) error { return fn(ctx, tx) })
		},
		httpidem.WithErrorLog(func(r *http.Request, err error) {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}))
	must(t, err)
	// The handler reads the rows the others insert; the first attempts
	// wait for each other in between, so that their transactions overlap.
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFrom[TTx](r.Context())
		b := db.Tx(tx)
		n, err := b.LedgerCountByRef(r.Context(), "shared")
		if err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, again := first.LoadOrStore(r.Header.Get(httpidem.Header), true); !again {
			arrived.Add(1)
			for deadline := time.Now().Add(2 * time.Second); arrived.Load() < clients && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		if err := b.LedgerInsert(r.Context(), "shared", 1); err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "saw %d", n)
	})))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	// One key claimed first, so that the racing claims find the key
	// table's pages there: claims into an empty table wait on its
	// extension lock, and on PostgreSQL a wait past the middleware's
	// 1 ms lock_timeout (WithNoWait) is answered 409 in progress, seen
	// here under load for a key nobody else held (the server logged the
	// lock timeouts of three first claims without an index tuple's
	// context). This case is about the retries.
	warm, err := dedupe.New(db.Driver())
	must(t, err)
	must(t, harness.WithTx(ctxT(t), db, harness.Default, func(tx TTx) error {
		_, err := warm.Do(ctxT(t), tx, dedupe.Request{Scope: "warm", Key: "k"}, func(context.Context) error { return nil })
		return err
	}))

	replies := make([]reply, clients)
	noErrors(t, race(clients, func(i int) error {
		var err error
		replies[i], err = s.send(ctxT(t), nil, req{user: "alice", keys: quoted(fmt.Sprint("conflict-", i)), body: "x"})
		return err
	}))
	for i, r := range replies {
		if r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("client %d: %d %q (middleware errors %v)", i, r.status, r.body, s.middlewareErrors())
		}
	}
	ddLedger(t, db, "shared", clients)
	ddKeys(t, db, clients+1)
	if attempts.Load() <= clients {
		t.Fatalf("%d transactions for %d requests: no conflict happened, so the retry went untested", attempts.Load(), clients)
	}
	t.Logf("%d transactions for %d requests", attempts.Load(), clients)
}

// httpTxOutcomeUnknown: when the transaction runner reports an error after
// the handler's transaction reached COMMIT (sqlonce.ErrCommitUnknown, or
// any error but one saying the database rolled it back), the client is
// told the outcome is unknown, never that the request was not carried
// out; a retry with the same key replays the answer if the commit went
// through and runs the request if it did not.
func httpTxOutcomeUnknown[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	var lose atomic.Value // "": commit normally; else the error the runner reports
	lose.Store("")
	s := startHTTPOn(t, db, nil, withTxFunc(func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
		how := lose.Swap("").(string)
		err := harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
			if err := fn(ctx, tx); err != nil {
				return err
			}
			if how == "rolled back" {
				return errors.New("lost before commit") // rolls back
			}
			return nil
		})
		switch {
		case err != nil && how != "rolled back":
			return err
		case how == "committed":
			return fmt.Errorf("commit: %w", sqlonce.ErrCommitUnknown)
		case how == "rolled back":
			return fmt.Errorf("commit: %w", sqlonce.ErrCommitUnknown)
		case how == "other":
			return errors.New("the runner failed after COMMIT")
		}
		return err
	}))
	for _, how := range []string{"committed", "rolled back", "other"} {
		lose.Store(how)
		q := req{user: "alice", ref: how, keys: quoted(how), body: "x"}
		r := s.mustSend(t, q)
		wantHTTPStatus(t, how, r, http.StatusInternalServerError)
		p := r.problem(t)
		if p.Code != httpidem.CodeOutcomeUnknown || strings.Contains(p.Detail, "not carried out") {
			t.Fatalf("%s: %+v", how, p)
		}
		again := s.mustSend(t, q)
		wantHTTPStatus(t, how+", retried", again, http.StatusCreated)
		if committed := how != "rolled back"; again.replayed() != committed {
			t.Fatalf("%s: retry replayed=%v", how, again.replayed())
		}
		ddLedger(t, db, how, 1)
	}
}

// onlyPGAborts is why the cases of a transaction the database aborted run
// on PostgreSQL alone.
const onlyPGAborts = "only PostgreSQL aborts a transaction after a failed statement (25P02 for the rest); MySQL and SQLite undo the statement alone and let the transaction commit"

// httpTxRolledBack: a handler that ignores a failed statement (and calls
// no Fail) leaves a PostgreSQL transaction aborted; recording the answer
// fails with 25P02 and the database rolls back. Without a TxFunc the
// driver runs the transaction and knows that its COMMIT was not lost:
// the client gets the Fail doc's "500 and nothing is recorded" (code
// internal), never "outcome unknown".
func httpTxRolledBack[TTx any](t *testing.T, f harness.Factory[TTx]) {
	db := f(t, 0)
	if db.Dialect() != "postgres" {
		t.Skip(onlyPGAborts)
	}
	s := startHTTP(t, db, func(w http.ResponseWriter, r *http.Request) int {
		tx, _ := httpidem.TxFrom[TTx](r.Context())
		b := db.Tx(tx)
		_, _ = b.OrderInsert(r.Context(), "dup", "c", 1)
		_, _ = b.OrderInsert(r.Context(), "dup", "c", 1) // 23505, ignored
		return 0
	}, httpidem.WithRequired(func(r *http.Request) bool { return false }))
	for _, keys := range [][]string{quoted("aborted"), quoted("aborted"), nil} {
		r := s.mustSend(t, req{user: "alice", ref: "aborted", keys: keys, body: "x"})
		wantHTTPStatus(t, "a transaction the database rolled back", r, http.StatusInternalServerError)
		if p := r.problem(t); p.Code != httpidem.CodeInternal || !strings.Contains(p.Detail, "not carried out") {
			t.Fatalf("keys %q: %+v, want code %s, not carried out", keys, p, httpidem.CodeInternal)
		}
	}
	ddLedger(t, db, "aborted", 0)
	ddKeys(t, db, 0)
	if n, err := db.Pool().OrderCountByCode(context.Background(), "dup"); err != nil || n != 0 {
		t.Fatalf("%d orders (%v), want 0", n, err)
	}
}
