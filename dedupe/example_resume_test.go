package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce/dedupe"
)

// An operation whose caller went away after a failed step is finished by
// the resumer (which a program runs with ResumeEvery), without the
// caller: its first step is not run again, and the caller's later retry
// with the same key replays the response.
func ExampleStore_ResumeStuck() {
	ctx := context.Background()
	db, drv, done := openDB(`CREATE TABLE refunds (id TEXT PRIMARY KEY)`)
	defer done()
	store, err := dedupe.New(drv)
	if err != nil {
		panic(err)
	}
	notified := 0
	down := true // the mail service is down at first
	refund := &dedupe.Operation[*sql.Tx]{Name: "refund", Steps: []dedupe.Step[*sql.Tx]{
		{Name: "record", InTx: func(ctx context.Context, tx *sql.Tx, st dedupe.StepState) ([]byte, error) {
			_, err := tx.ExecContext(ctx, `INSERT INTO refunds VALUES (?)`, string(st.Input))
			return nil, err
		}},
		{Name: "notify", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) {
			if down {
				return nil, errors.New("mail service unavailable")
			}
			notified++
			return []byte("refunded " + string(st.Input)), nil
		}},
	}}
	req := dedupe.Request{Scope: "customer-7", Key: "refund-1"}

	_, err = store.RunSteps(ctx, req, []byte("order-1"), refund)
	fmt.Println("call:", err)
	down = false
	finished, failed, err := store.ResumeStuck(ctx, 5, refund)
	fmt.Println("resumer:", finished, "finished,", failed, "given up,", err)
	res, err := store.RunSteps(ctx, req, []byte("order-1"), refund)
	if err != nil {
		panic(err)
	}
	fmt.Printf("retry: %v, %s\n", res, res.Response)

	var refunds int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM refunds`).Scan(&refunds); err != nil {
		panic(err)
	}
	fmt.Println("refunds:", refunds, "notifications:", notified)
	// Output:
	// call: mail service unavailable
	// resumer: 1 finished, 0 given up, <nil>
	// retry: already done, refunded order-1
	// refunds: 1 notifications: 1
}
