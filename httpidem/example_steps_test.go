package httpidem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
)

// A checkout endpoint run as steps: reserve the stock (database), charge
// the card (a payment provider, with a key of the step's own), write the
// order and answer (database). The first request stops after the card was
// charged; the client's retry with the same Idempotency-Key resumes at the
// order: the stock is reserved once, the card charged once, and a third
// request gets the answer replayed.
func ExampleMiddleware_Steps() {
	ctx := context.Background()
	db, drv, done := openDB(`CREATE TABLE stock (item TEXT PRIMARY KEY, left INTEGER NOT NULL);
		INSERT INTO stock VALUES ('book', 10);
		CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, charge TEXT NOT NULL)`)
	defer done()
	m, err := httpidem.New(drv, func(r *http.Request) string {
		return r.Header.Get("X-User") // stands in for real authentication
	})
	if err != nil {
		panic(err)
	}

	charges := map[string]int{} // the payment provider, deduping by key
	failOnce := true
	checkout := &dedupe.Operation[*sql.Tx]{Name: "checkout", Steps: []dedupe.Step[*sql.Tx]{
		{Name: "reserve", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			req, err := httpidem.RequestOf(st)
			if err != nil {
				return nil, err
			}
			_, err = tx.ExecContext(ctx, `UPDATE stock SET left = left - 1 WHERE item = ?`, string(req.Body))
			return nil, err
		}},
		{Name: "charge", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			charges[st.Key]++
			return []byte("ch_" + st.Key[:8]), nil
		}},
		{Name: "order", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			if failOnce {
				failOnce = false
				return nil, errors.New("the process died")
			}
			req, err := httpidem.RequestOf(st)
			if err != nil {
				return nil, err
			}
			charge, _ := st.Result("charge")
			var id int64
			err = tx.QueryRowContext(ctx, `INSERT INTO orders (customer, charge) VALUES (?, ?) RETURNING id`, req.Principal, string(charge)).Scan(&id)
			if err != nil {
				return nil, err
			}
			h := http.Header{"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/orders/%d", id)}}
			return httpidem.Respond(http.StatusCreated, h, fmt.Appendf(nil, `{"order":%d,"charge":%q}`, id, charge))
		}},
	}}
	mux := http.NewServeMux()
	mux.Handle("POST /checkout", m.Steps(checkout))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/checkout", strings.NewReader("book"))
		req.Header.Set("X-User", "customer-7")
		req.Header.Set(httpidem.Header, `"checkout-1"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
			continue
		}
		fmt.Println(resp.StatusCode, resp.Header.Get("Location"), "replayed:", resp.Header.Get(httpidem.ReplayHeader) == "true", string(body)[:10])
	}

	var left, orders int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT left FROM stock), (SELECT count(*) FROM orders)`).Scan(&left, &orders); err != nil {
		panic(err)
	}
	fmt.Println("stock left:", left, "orders:", orders, "charges:", len(charges))
	// Output:
	// 500 application/problem+json
	// 201 /orders/1 replayed: false {"order":1
	// 201 /orders/1 replayed: true {"order":1
	// stock left: 9 orders: 1 charges: 1
}
