package httpidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/sqlonce/sqlonce/httpidem"
)

// An API whose clients already send X-Idempotency-Key and expect 409 for
// a key used again with another request.
func ExampleWithKeyHeader() {
	_, drv, done := openDB(tables)
	defer done()

	m, err := httpidem.New(drv,
		func(r *http.Request) string { return r.Header.Get("X-User") },
		httpidem.WithKeyHeader("X-Idempotency-Key"),
		httpidem.WithKeyReuseStatus(http.StatusConflict))
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
	order := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(order)))
	defer srv.Close()

	send := func(header, key, body string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("X-User", "alice")
		req.Header.Set(header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get(httpidem.ReplayHeader), string(b))
	}
	send("X-Idempotency-Key", `"o-1"`, "item=42")
	send("X-Idempotency-Key", `"o-1"`, "item=42") // a retry
	send("X-Idempotency-Key", `"o-1"`, "item=43") // the key reused
	send("Idempotency-Key", `"o-2"`, "item=44")   // not the field this API reads
	// Output:
	// 201  order 1
	// 201 true order 1
	// 409  {"type":"about:blank","title":"Conflict","status":409,"detail":"this X-Idempotency-Key was used with a different request; use a new key for a new request","code":"idempotency-key-reused"}
	// 400  {"type":"about:blank","title":"Bad Request","status":400,"detail":"this operation requires an X-Idempotency-Key header with a unique key per operation, sent again unchanged on every retry","code":"idempotency-key-missing"}
}
