package conformance

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runHTTPContract: the parts of the HTTP contract an existing API
// chooses, the field that carries the key and the status of a reused
// key, in both modes, and the metadata key and the code of a reused key
// in grpcidem.
func runHTTPContract[TTx any](t *testing.T, f harness.Factory[TTx]) {
	for _, mode := range []struct {
		name  string
		build httpMode[TTx]
	}{{"Tx", httpidem.New[TTx]}, {"Lease", leased[TTx]}} {
		t.Run(mode.name+"/KeyHeader", func(t *testing.T) {
			db := f(t, 0)
			s := startHTTPOn(t, db, nil, mode.build,
				httpidem.WithKeyHeader("x-idempotency-key"), httpidem.WithDocs("https://api.example.com/docs"))
			xkey := func(v ...string) http.Header { return http.Header{"X-Idempotency-Key": v} }
			q := req{user: "alice", body: `{"amount":100}`, header: xkey(`"k1"`)}
			first := s.mustSend(t, q)
			wantHTTPStatus(t, "first", first, http.StatusCreated)
			sameAnswer(t, "repeat", first, s.mustSend(t, q))

			// The default field is not read: without the configured one
			// the request has no key, and the problem names the field.
			r := s.mustSend(t, req{user: "alice", body: q.body, keys: quoted("k1")})
			wantHTTPStatus(t, "Idempotency-Key only", r, http.StatusBadRequest)
			p := r.problem(t)
			if p.Code != httpidem.CodeKeyMissing || !strings.Contains(p.Detail, "X-Idempotency-Key") || p.Title != "X-Idempotency-Key is missing" {
				t.Fatalf("missing key problem %+v, want it to name X-Idempotency-Key", p)
			}
			// The configured field is parsed as Idempotency-Key is: the
			// bare k1 is the key "k1".
			sameAnswer(t, "bare k1", first, s.mustSend(t, req{user: "alice", body: q.body, header: xkey("k1")}))
			r = s.mustSend(t, req{user: "alice", body: q.body, header: xkey("k 1")})
			wantHTTPStatus(t, "white space in a bare key", r, http.StatusBadRequest)
			if p := r.problem(t); p.Code != httpidem.CodeKeyInvalid || !strings.Contains(p.Detail, "X-Idempotency-Key") {
				t.Fatalf("invalid key problem %+v", p)
			}
			// Strict, it takes the quoted form only, as Idempotency-Key does.
			strict := startHTTPOn(t, db, nil, mode.build, httpidem.WithKeyHeader("x-idempotency-key"), httpidem.WithStrictKey())
			r = strict.mustSend(t, req{user: "alice", body: q.body, header: xkey("k1")})
			wantHTTPStatus(t, "strict: bare k1", r, http.StatusBadRequest)
			if p := r.problem(t); p.Code != httpidem.CodeKeyInvalid || !strings.Contains(p.Detail, "X-Idempotency-Key") {
				t.Fatalf("strict: invalid key problem %+v", p)
			}
			sameAnswer(t, "strict: quoted k1", first, strict.mustSend(t, req{user: "alice", body: q.body, header: xkey(`"k1"`)}))
			r = s.mustSend(t, req{user: "alice", body: q.body, header: xkey(`"k1"`, `"k2"`)})
			wantHTTPStatus(t, "two fields", r, http.StatusBadRequest)
			// Reuse is still 422 by default.
			r = s.mustSend(t, req{user: "alice", body: `{"amount":999}`, header: xkey(`"k1"`)})
			wantHTTPStatus(t, "other body", r, http.StatusUnprocessableEntity)
			if p := r.problem(t); p.Code != httpidem.CodeKeyReused || !strings.Contains(p.Detail, "X-Idempotency-Key") {
				t.Fatalf("reuse problem %+v", p)
			}
			if n := s.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			ddLedger(t, db, "order", 1)
		})

		for _, st := range []int{http.StatusConflict, http.StatusBadRequest, http.StatusUnprocessableEntity} {
			t.Run(mode.name+"/KeyReuseStatus"+http.StatusText(st), func(t *testing.T) {
				db := f(t, 0)
				s := startHTTPOn(t, db, nil, mode.build, httpidem.WithKeyReuseStatus(st))
				first := s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "a"})
				wantHTTPStatus(t, "first", first, http.StatusCreated)
				for name, other := range map[string]req{
					"other body":  {user: "alice", keys: quoted("k1"), body: "b"},
					"other route": {path: "/refunds/", user: "alice", keys: quoted("k1"), body: "a"},
				} {
					r := s.mustSend(t, other)
					wantHTTPStatus(t, name, r, st)
					if p := r.problem(t); p.Code != httpidem.CodeKeyReused {
						t.Fatalf("%s: code %q", name, p.Code)
					}
					// Sending a reused key again cannot succeed: no Retry-After.
					if ra := r.header.Get("Retry-After"); ra != "" {
						t.Fatalf("%s: Retry-After %q on a reused key", name, ra)
					}
				}
				sameAnswer(t, "the first request again", first, s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "a"}))
				if n := s.runs.Load(); n != 1 {
					t.Fatalf("handler ran %d times, want 1", n)
				}
				ddLedger(t, db, "order", 1)
			})
		}
	}

	// With reuse answered 409, a key whose request is still running is
	// also 409: the problem's code and Retry-After tell them apart. Lease
	// mode, so that SQLite answers 409 too.
	t.Run("Lease/KeyReuse409BesideInProgress409", func(t *testing.T) {
		db := f(t, 0)
		entered, release := make(chan struct{}), make(chan struct{})
		s := startHTTPOn(t, db, func(w http.ResponseWriter, r *http.Request) int {
			if r.Header.Get("X-Block") != "" {
				close(entered)
				<-release
			}
			return 0
		}, leased[TTx], httpidem.WithKeyReuseStatus(http.StatusConflict))
		done := make(chan reply, 1)
		go func() {
			r, err := s.send(ctxT(t), nil, req{user: "alice", keys: quoted("k1"), body: "a", header: http.Header{"X-Block": {"1"}}})
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		select {
		case <-entered:
		case r := <-done:
			t.Fatalf("the first request ended before its handler blocked: %d %q", r.status, r.body)
		}
		r := s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "a"})
		close(release)
		wantHTTPStatus(t, "duplicate while running", r, http.StatusConflict)
		if p := r.problem(t); p.Code != httpidem.CodeInProgress || r.header.Get("Retry-After") == "" {
			t.Fatalf("in progress: %+v, Retry-After %q", p, r.header.Get("Retry-After"))
		}
		first := <-done
		wantHTTPStatus(t, "first", first, http.StatusCreated)
		r = s.mustSend(t, req{user: "alice", keys: quoted("k1"), body: "b"})
		wantHTTPStatus(t, "reuse", r, http.StatusConflict)
		if p := r.problem(t); p.Code != httpidem.CodeKeyReused || r.header.Get("Retry-After") != "" {
			t.Fatalf("reuse: %+v, Retry-After %q", p, r.header.Get("Retry-After"))
		}
		ddLedger(t, db, "order", 1)
	})

	for _, code := range []codes.Code{codes.FailedPrecondition, codes.InvalidArgument, codes.AlreadyExists} {
		t.Run("GRPC/KeyReuseCode"+code.String(), func(t *testing.T) {
			db := f(t, 0)
			g := startGRPCOn(t, db, db.Driver(), nil, grpcidem.WithKeyReuseCode(code))
			ctx := ctxT(t)
			first, _, err := g.call(ctx, "alice", "k1", "a")
			must(t, err)
			_, _, err = g.call(ctx, "alice", "k1", "b")
			wantCode(t, "key reused with another message", err, code)
			if !strings.Contains(status.Convert(err).Message(), "used with a different call") {
				t.Fatalf("reuse: %v", err)
			}
			again, replayed, err := g.call(ctx, "alice", "k1", "a")
			must(t, err)
			if again != first || !replayed {
				t.Fatalf("repeat: %q replayed=%v, want %q replayed", again, replayed, first)
			}
			if n := g.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			ddLedger(t, db, "a", 1)
			ddLedger(t, db, "b", 0)
		})
	}

	t.Run("GRPC/MetadataKey", func(t *testing.T) {
		db := f(t, 0)
		g := startGRPCOn(t, db, db.Driver(), nil, grpcidem.WithMetadataKey("X-Idempotency-Key"))
		ctx := ctxT(t)
		call := func(pairs ...string) (string, bool, error) {
			out := new(wrapperspb.StringValue)
			var header metadata.MD
			err := g.conn.Invoke(metadata.NewOutgoingContext(ctx, metadata.Pairs(append([]string{"x-user", "alice"}, pairs...)...)),
				grpcPlace, wrapperspb.String("a"), out, grpc.Header(&header))
			replayed := len(header.Get(grpcidem.ReplayedKey)) == 1
			return out.GetValue(), replayed, err
		}
		first, replayed, err := call("x-idempotency-key", "k1")
		must(t, err)
		if replayed {
			t.Fatal("a first response marked as replayed")
		}
		again, replayed, err := call("x-idempotency-key", "k1")
		must(t, err)
		if again != first || !replayed {
			t.Fatalf("repeat: %q replayed=%v, want %q replayed", again, replayed, first)
		}
		// The default key is not read; the error names the configured one.
		_, _, err = call(grpcidem.MetadataKey, "k1")
		wantCode(t, "idempotency-key only", err, codes.InvalidArgument)
		if !strings.Contains(status.Convert(err).Message(), "x-idempotency-key") {
			t.Fatalf("error %q does not name x-idempotency-key", status.Convert(err).Message())
		}
		_, _, err = call("x-idempotency-key", "k1", "x-idempotency-key", "k2")
		wantCode(t, "two values", err, codes.InvalidArgument)
		if n := g.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "a", 1)
	})
}
