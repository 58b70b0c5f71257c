package httpidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sqlonce/sqlonce/httpidem"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up.

// A form posted without a key, guarded against double submits:
// the key is derived from the caller, the route and the body, for a short
// window.
func ExampleWithNoRepeatSubmit() {
	_, drv, done := openDB(tables)
	defer done()

	m, err := httpidem.New(drv,
		func(r *http.Request) string { return r.Header.Get("X-User") },
		httpidem.WithNoRepeatSubmit(10*time.Second))
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
	order := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order %d placed", orders.Add(1))
	}
	srv := httptest.NewServer(m.Wrap(http.HandlerFunc(order)))
	defer srv.Close()

	post(srv.URL+"/checkout", "alice", "", "item=42&qty=1")
	post(srv.URL+"/checkout", "alice", "", "item=42&qty=1") // double click
	post(srv.URL+"/checkout", "alice", "", "item=42&qty=2") // another order
	// Output:
	// 200 replayed=false order 1 placed
	// 200 replayed=true order 1 placed
	// 200 replayed=false order 2 placed
}
