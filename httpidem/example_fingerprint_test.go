package httpidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/sqlonce/sqlonce/httpidem"
)

// A JSON API whose clients may re-encode a body on retry: with
// FingerprintJSON, the order of keys and white space do not make the
// retry another request; another amount does. A replay hook counts the
// replays.
func ExampleFingerprintJSON() {
	_, drv, done := openDB(tables)
	defer done()

	var replays atomic.Int64
	m, err := httpidem.New(drv,
		func(r *http.Request) string { return r.Header.Get("X-User") },
		httpidem.WithFingerprint(httpidem.FingerprintJSON),
		httpidem.WithReplayHook(func(r *http.Request, rep *httpidem.Replay) { replays.Add(1) }))
	if err != nil {
		panic(err)
	}
	var transfers atomic.Int64
	transfer := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "transfer %d", transfers.Add(1))
	}
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", m.Wrap(http.HandlerFunc(transfer)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	key := `"b6c1d9e0-json"`
	post(srv.URL+"/transfers", "alice", key, `{"amount":100,"to":"bob"}`)
	post(srv.URL+"/transfers", "alice", key, `{ "to": "bob", "amount": 100 }`) // re-encoded
	post(srv.URL+"/transfers", "alice", key, `{"amount":101,"to":"bob"}`)      // another request
	fmt.Println("replays:", replays.Load())
	// Output:
	// 201 replayed=false transfer 1
	// 201 replayed=true transfer 1
	// 422 {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used with a different request; use a new key for a new request","code":"idempotency-key-reused"}
	// replays: 1
}
