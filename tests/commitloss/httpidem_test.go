package commitloss

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/httpidem"
)

// checkHTTP serves a request in httpidem's transactional mode on a driver
// whose connection the proxy cuts at COMMIT: the client must be told that
// the outcome is unknown (never that the request was not carried out),
// and its resend with the same key must replay the answer when the
// server had committed, or run the request when it had not, leaving one
// ledger row either way.
func checkHTTP[TTx any](t *testing.T, _ context.Context, l *ledger[TTx], mode cutMode) {
	t.Helper()
	var logged []error
	m, err := httpidem.New(l.proxied, func(*http.Request) string { return "alice" },
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
		if err := l.insert(r.Context(), tx, "http"); err != nil {
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

	l.proxy.ArmNext(mode.fault)
	status, _, body := send()
	if cuts(l.proxy) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (answer %d %q)", cuts(l.proxy), status, body)
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

	// The resend may meet the cut session's transaction still holding the
	// key on the server (MySQL ends it once it notices the connection
	// gone) and get 409 "in progress, retry later": retried, as a client
	// does.
	status, header, body := send()
	for deadline := time.Now().Add(30 * time.Second); status == http.StatusConflict && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		status, header, body = send()
	}
	if status != http.StatusCreated || string(body) != "paid" || (header.Get(httpidem.ReplayHeader) == "true") != mode.committed {
		t.Fatalf("resend: %d %q replayed=%q, want 201 \"paid\" replayed=%v", status, body, header.Get(httpidem.ReplayHeader), mode.committed)
	}
	if n := l.count("http"); n != 1 {
		t.Fatalf("%d ledger rows, want exactly 1", n)
	}
}

func TestHTTPIdemPostgres(t *testing.T) { eachMode(t, postgresLedger, checkHTTP[pgx.Tx]) }

func TestHTTPIdemMySQL(t *testing.T) { eachMode(t, mysqlLedger, checkHTTP[*sql.Tx]) }
