package failover

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// checkIdemReadOnly sends a request through httpidem (transactional and
// lease mode) and a call through grpcidem built on a hot standby: each is
// answered 503 with Retry-After and CodeUnavailable, or Unavailable, and
// not carried out. The same request, key unchanged, sent to the same
// middleware on the primary then runs once: one ledger row per key on the
// primary.
func checkIdemReadOnly(t *testing.T, standby, primary *pgxpool.Pool) {
	ctx := context.Background()
	principal := func(*http.Request) string { return "alice" }
	handler := func(key string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if tx, ok := httpidem.TxFrom[pgx.Tx](ctx); ok {
				if _, err := tx.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key); err != nil {
					httpidem.Fail(ctx, err)
					http.Error(w, "payment failed", http.StatusInternalServerError)
					return
				}
			} else if _, err := primary.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key); err != nil {
				// Lease mode: the work outside the key's transaction.
				httpidem.Fail(ctx, err)
				http.Error(w, "payment failed", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("paid"))
		})
	}
	leased := func(d sqlonce.Driver[pgx.Tx], principal func(*http.Request) string, opts ...httpidem.Option) (*httpidem.Middleware[pgx.Tx], error) {
		return httpidem.NewLeased(d, principal, 0, opts...)
	}
	send := func(pool *pgxpool.Pool, key string, build func(sqlonce.Driver[pgx.Tx], func(*http.Request) string, ...httpidem.Option) (*httpidem.Middleware[pgx.Tx], error), opts ...httpidem.Option) *httptest.ResponseRecorder {
		m, err := build(testdrv.Pgx(t, pool), principal, opts...)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set(httpidem.Header, `"`+key+`"`)
		rec := httptest.NewRecorder()
		m.Wrap(handler(key)).ServeHTTP(rec, req)
		return rec
	}
	quiet := httpidem.WithErrorLog(func(*http.Request, error) {})
	for _, mode := range []struct {
		key   string
		build func(sqlonce.Driver[pgx.Tx], func(*http.Request) string, ...httpidem.Option) (*httpidem.Middleware[pgx.Tx], error)
	}{
		{"http-tx", httpidem.New[pgx.Tx]},
		{"http-lease", leased},
	} {
		rec := send(standby, mode.key, mode.build, quiet)
		var p httpidem.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusServiceUnavailable || p.Code != httpidem.CodeUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s on a standby: %d, Retry-After %q, %s; want 503 %s with Retry-After", mode.key, rec.Code,
				rec.Header().Get("Retry-After"), rec.Body, httpidem.CodeUnavailable)
		}
		if rec := send(primary, mode.key, mode.build); rec.Code != http.StatusCreated {
			t.Errorf("%s resent to the primary: %d %s, want 201", mode.key, rec.Code, rec.Body)
		}
	}

	sqlStandby, sqlPrimary := pgSQL(t, standby), pgSQL(t, primary)
	checkIdemReadOnlySQL(t, testdrv.PgSQL(t, sqlStandby), testdrv.PgSQL(t, sqlPrimary), "INSERT INTO ledger (scope, k) VALUES ('s', $1)", "http-sql")

	call := func(pool *pgxpool.Pool, key string) error {
		ic, err := grpcidem.New(testdrv.Pgx(t, pool), func(context.Context) string { return "alice" })
		if err != nil {
			t.Fatal(err)
		}
		ctx := metadata.NewIncomingContext(ctx, metadata.Pairs(grpcidem.MetadataKey, key))
		_, err = ic.Unary()(ctx, wrapperspb.String("x"), &grpc.UnaryServerInfo{FullMethod: "/test.Pay/Pay"},
			func(ctx context.Context, _ any) (any, error) {
				tx, _ := grpcidem.TxFrom[pgx.Tx](ctx)
				if _, err := tx.Exec(ctx, "INSERT INTO ledger (scope, k) VALUES ('s', $1)", key); err != nil {
					return nil, err
				}
				return wrapperspb.String("paid"), nil
			})
		return err
	}
	if err := call(standby, "grpc"); status.Code(err) != codes.Unavailable {
		t.Errorf("grpcidem on a standby: %v, want Unavailable", err)
	}
	if err := call(primary, "grpc"); err != nil {
		t.Errorf("grpcidem resent to the primary: %v", err)
	}

	for _, k := range []string{"http-tx", "http-lease", "http-sql", "grpc"} {
		var n int
		if err := primary.QueryRow(ctx, "SELECT count(*) FROM ledger WHERE k = $1", k).Scan(&n); err != nil || n != 1 {
			t.Errorf("ledger rows for %s on the primary: %d, %v; want 1", k, n, err)
		}
	}
}

// checkIdemReadOnlySQL is checkIdemReadOnly's transactional mode on
// database/sql, ro on a server that takes no writes, rw on the primary:
// Run reads the key outside the transaction, the handler runs, and its
// own write (insert, the key its argument) is the one refused; the
// handler answers 500 and calls Fail, and the client is still told 503,
// not carried out. Resent to rw, the request runs (201).
func checkIdemReadOnlySQL(t *testing.T, ro, rw sqlonce.Driver[*sql.Tx], insert, key string) {
	t.Helper()
	send := func(d sqlonce.Driver[*sql.Tx]) *httptest.ResponseRecorder {
		m, err := httpidem.New(d, func(*http.Request) string { return "alice" }, httpidem.WithErrorLog(func(*http.Request, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
		req.Header.Set(httpidem.Header, `"`+key+`"`)
		rec := httptest.NewRecorder()
		m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := httpidem.TxFrom[*sql.Tx](r.Context())
			if _, err := tx.ExecContext(r.Context(), insert, key); err != nil {
				httpidem.Fail(r.Context(), err)
				http.Error(w, "payment failed", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})).ServeHTTP(rec, req)
		return rec
	}
	if rec := send(ro); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("database/sql, server without writes: %d, Retry-After %q, %s; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if rec := send(rw); rec.Code != http.StatusCreated {
		t.Errorf("database/sql, resent to the primary: %d %s, want 201", rec.Code, rec.Body)
	}
}
