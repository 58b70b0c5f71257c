package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
)

// provider stands for a payment provider and a mail service: each
// dedupes by the idempotency key it is given, as Stripe does.
type provider struct{ charges, emails map[string]int }

func (p *provider) charge(key string) string { p.charges[key]++; return "ch_" + key[:8] }
func (p *provider) email(key string)         { p.emails[key]++ }

// A payment is four steps: reserve the stock, charge the card, write the
// order, send the receipt. The process dies (here: the order step fails)
// after the card was charged; the client's retry with the same key
// resumes at the order step: the stock is reserved once, the card charged
// once.
func ExampleStore_RunSteps() {
	ctx := context.Background()
	db, drv, done := openDB(`CREATE TABLE stock (item TEXT PRIMARY KEY, left INTEGER NOT NULL);
		INSERT INTO stock VALUES ('book', 10);
		CREATE TABLE orders (id TEXT PRIMARY KEY, charge TEXT NOT NULL)`)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	pay := &provider{charges: map[string]int{}, emails: map[string]int{}}
	crash := errors.New("the process died")
	failOnce := true

	checkout := &dedupe.Operation[*sql.Tx]{Name: "checkout", Steps: []dedupe.Step[*sql.Tx]{
		{Name: "reserve", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			_, err := tx.ExecContext(ctx, `UPDATE stock SET left = left - 1 WHERE item = ?`, string(st.Input))
			return nil, err
		}},
		{Name: "charge", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			return []byte(pay.charge(st.Key)), nil
		}},
		{Name: "order", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			if failOnce {
				failOnce = false
				return nil, crash
			}
			charge, _ := st.Result("charge")
			_, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('order-1', ?)`, string(charge))
			return []byte(`{"order":"order-1"}`), err
		}},
		{Name: "email", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			pay.email(st.Key)
			order, _ := st.Result("order")
			return order, nil // the operation's response
		}},
	}}
	req := dedupe.Request{Scope: "customer-7", Key: "checkout-1", Fingerprint: dedupe.Fingerprint([]byte("book"))}

	_, err = store.RunSteps(ctx, req, []byte("book"), checkout)
	fmt.Println("first call:", err)
	res, err := store.RunSteps(ctx, req, []byte("book"), checkout)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry: %v, %s\n", res, res.Response)
	res, err = store.RunSteps(ctx, req, []byte("book"), checkout)
	if err != nil {
		panic(err)
	}
	fmt.Printf("repeat: %v, %s\n", res, res.Response)

	var left, orders int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT left FROM stock), (SELECT count(*) FROM orders)`).Scan(&left, &orders); err != nil {
		panic(err)
	}
	fmt.Println("stock left:", left, "orders:", orders, "charges:", len(pay.charges), "emails:", len(pay.emails))
	// Output:
	// first call: the process died
	// retry: first run, {"order":"order-1"}
	// repeat: already done, {"order":"order-1"}
	// stock left: 9 orders: 1 charges: 1 emails: 1
}
