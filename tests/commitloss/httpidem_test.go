package commitloss

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// checkHTTP serves a request in httpidem's transactional mode on a driver
// whose connection the proxy cuts at COMMIT: the client must be told that
// the outcome is unknown (never that the request was not carried out),
// and its resend with the same key must replay the answer when the
// server had committed, or run the request when it had not, leaving one
// ledger row either way.
func checkHTTP[TTx any](t *testing.T, proxied sqlonce.Driver[TTx], p *faultproxy.Proxy, mode cutMode,
	insert func(ctx context.Context, tx TTx, ref string) error, count func(ref string) int64) {
	t.Helper()
	var logged []error
	m, err := httpidem.New(proxied, func(*http.Request) string { return "alice" },
		httpidem.WithErrorLog(func(_ *http.Request, err error) { logged = append(logged, err) }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := httpidem.TxFrom[TTx](r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if err := insert(r.Context(), tx, "http"); err != nil {
			httpidem.Fail(r.Context(), err)
			http.Error(w, "insert failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "paid")
	})))
	defer srv.Close()
	send := func() (int, http.Header, []byte) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(httpidem.Header, `"`+t.Name()+`"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, b
	}

	p.ArmNext(mode.fault)
	status, _, body := send()
	if cuts(p) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (answer %d %q)", cuts(p), status, body)
	}
	var prob httpidem.Problem
	if err := json.Unmarshal(body, &prob); err != nil || status != http.StatusInternalServerError ||
		prob.Code != httpidem.CodeOutcomeUnknown || strings.Contains(prob.Detail, "not carried out") {
		t.Fatalf("cut at COMMIT: %d %q, want 500 %s", status, body, httpidem.CodeOutcomeUnknown)
	}
	if len(logged) != 1 || !errors.Is(logged[0], sqlonce.ErrCommitUnknown) {
		t.Fatalf("error log: %v, want the lost commit (ErrCommitUnknown)", logged)
	}
	t.Logf("cut at COMMIT: %q; logged %v", prob.Detail, logged[0])

	status, header, body := send()
	if status != http.StatusCreated || string(body) != "paid" || (header.Get(httpidem.ReplayHeader) == "true") != mode.committed {
		t.Fatalf("resend: %d %q replayed=%q, want 201 \"paid\" replayed=%v", status, body, header.Get(httpidem.ReplayHeader), mode.committed)
	}
	if n := count("http"); n != 1 {
		t.Fatalf("%d ledger rows, want exactly 1", n)
	}
}

func TestHTTPIdemPostgres(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := testdb.NewPostgres(t, 4)
			if _, err := db.Pool.Exec(ctx, "CREATE TABLE ledger_cl (ref text NOT NULL, amount bigint NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			cfg, err := pgxpool.ParseConfig(db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			p := faultproxy.Start(t, faultproxy.Postgres, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)), 0)
			host, port, _ := net.SplitHostPort(p.Addr())
			cfg.ConnConfig.Host = host
			fmt.Sscan(port, &cfg.ConnConfig.Port)
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			checkHTTP(t, pgxdriver.New(pool), p, mode,
				func(ctx context.Context, tx pgx.Tx, ref string) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES ($1, 1)", ref)
					return err
				},
				func(ref string) int64 {
					var n int64
					if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = $1", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				})
		})
	}
}

func TestHTTPIdemMySQL(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := testdb.NewMySQL(t, 4)
			if _, err := db.DB.ExecContext(ctx, "CREATE TABLE ledger_cl (ref VARCHAR(255) NOT NULL, amount BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			cfg, err := mysql.ParseDSN(db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			p := faultproxy.Start(t, faultproxy.MySQL, cfg.Addr, 0)
			cfg.Addr = p.Addr()
			cfg.Net = "tcp"
			proxied, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			defer proxied.Close()
			checkHTTP(t, mysqldriver.New(proxied), p, mode,
				func(ctx context.Context, tx *sql.Tx, ref string) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES (?, 1)", ref)
					return err
				},
				func(ref string) int64 {
					var n int64
					if err := db.DB.QueryRowContext(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = ?", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				})
		})
	}
}
