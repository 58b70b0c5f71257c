package routers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func TestPostgres(t *testing.T) { run(t, harness.Postgres) }
func TestMySQL(t *testing.T)    { run(t, harness.MySQL) }
func TestSQLite(t *testing.T)   { run(t, harness.SQLite) }

// order is the business logic every router's handler runs: one ledger
// row in the request's transaction, then 201, or 402 for a declined card
// (an error answer, recorded like any answer under RecordAll).
func order[TTx any](db harness.DB[TTx], r *http.Request, id string) (int, string, error) {
	tx, ok := httpidem.TxFrom[TTx](r.Context())
	if !ok {
		return 0, "", errors.New("no transaction")
	}
	if err := db.Tx(tx).LedgerInsert(r.Context(), "order-"+id, 1); err != nil {
		httpidem.Fail(r.Context(), err)
		return 0, "", err
	}
	if id == "declined" {
		return http.StatusPaymentRequired, "card declined", nil
	}
	return http.StatusCreated, fmt.Sprintf(`{"order":%q,"at":%d}`, id, time.Now().UnixNano()), nil
}

func run[TTx any](t *testing.T, f harness.Factory[TTx]) {
	for name, build := range map[string]func(t *testing.T, db harness.DB[TTx]) http.Handler{
		"chi": func(t *testing.T, db harness.DB[TTx]) http.Handler {
			m := newMiddleware(t, db, httpidem.WithRoute(ChiRoute))
			r := chi.NewRouter()
			r.With(m.Wrap).Post("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
				status, body, err := order(db, r, chi.URLParam(r, "id"))
				if err != nil {
					http.Error(w, "failed", http.StatusInternalServerError)
					return
				}
				w.WriteHeader(status)
				io.WriteString(w, body)
			})
			r.With(m.Wrap).Post("/refunds/{id}", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			})
			return r
		},
		"echo": func(t *testing.T, db harness.DB[TTx]) http.Handler {
			m := newMiddleware(t, db, httpidem.WithRoute(Route))
			e := echo.New()
			e.Use(Echo(m.Wrap))
			e.POST("/orders/:id", func(c echo.Context) error {
				status, body, err := order(db, c.Request(), c.Param("id"))
				switch {
				case err != nil:
					return err
				case status == http.StatusPaymentRequired:
					// Returned, not written: echo's error handler writes it.
					return echo.NewHTTPError(status, body)
				}
				return c.String(status, body)
			})
			e.POST("/refunds/:id", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })
			return e
		},
		"gin": func(t *testing.T, db harness.DB[TTx]) http.Handler {
			m := newMiddleware(t, db, httpidem.WithRoute(Route))
			gin.SetMode(gin.TestMode)
			g := gin.New()
			g.Use(Gin(m.Wrap))
			g.POST("/orders/:id", func(c *gin.Context) {
				status, body, err := order(db, c.Request, c.Param("id"))
				if err != nil {
					c.AbortWithStatus(http.StatusInternalServerError)
					return
				}
				c.String(status, body)
			})
			g.POST("/refunds/:id", func(c *gin.Context) { c.Status(http.StatusCreated) })
			return g
		},
	} {
		t.Run(name, func(t *testing.T) {
			db := f(t, 0)
			srv := httptest.NewServer(build(t, db))
			t.Cleanup(srv.Close)
			send := func(path, key string) (int, http.Header, string) {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+path, strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(httpidem.Header, `"`+key+`"`)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, resp.Header, string(b)
			}
			replayed := func(h http.Header) bool { return h.Get(httpidem.ReplayHeader) == "true" }

			// A success: run once, replayed byte for byte.
			status, h, body := send("/orders/7", "k7")
			if status != http.StatusCreated || replayed(h) || !strings.Contains(body, `"order":"7"`) {
				t.Fatalf("first: %d replayed=%v %q", status, replayed(h), body)
			}
			status2, h2, body2 := send("/orders/7", "k7")
			if status2 != status || !replayed(h2) || body2 != body || h2.Get("Content-Type") != h.Get("Content-Type") {
				t.Fatalf("repeat: %d replayed=%v %q %q, want %d %q %q", status2, replayed(h2), body2, h2.Get("Content-Type"), status, body, h.Get("Content-Type"))
			}
			// The key on another route: refused.
			if status, _, body := send("/refunds/7", "k7"); status != http.StatusUnprocessableEntity {
				t.Fatalf("key on another route: %d %q", status, body)
			}
			// An error answer (echo: returned, not written) is recorded as
			// the client got it, never as an empty 200.
			status, h, body = send("/orders/declined", "kd")
			if status != http.StatusPaymentRequired || !strings.Contains(body, "card declined") {
				t.Fatalf("declined: %d %q", status, body)
			}
			status2, h2, body2 = send("/orders/declined", "kd")
			if status2 != status || !replayed(h2) || body2 != body || h2.Get("Content-Type") != h.Get("Content-Type") {
				t.Fatalf("declined again: %d replayed=%v %q, want %d %q", status2, replayed(h2), body2, status, body)
			}
			for ref, want := range map[string]int64{"order-7": 1, "order-declined": 1} {
				n, err := db.Pool().LedgerCountByRef(context.Background(), ref)
				if err != nil {
					t.Fatal(err)
				}
				if n != want {
					t.Fatalf("%s: %d ledger rows, want %d", ref, n, want)
				}
			}
		})
	}
}

func newMiddleware[TTx any](t *testing.T, db harness.DB[TTx], opts ...httpidem.Option) *httpidem.Middleware[TTx] {
	t.Helper()
	m, err := httpidem.New(db.Driver(), func(*http.Request) string { return "alice" }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
