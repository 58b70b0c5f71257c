package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// An operation whose caller went away after a failed step is finished by
// the completer (which a program runs with CompleteEvery), without the
// caller: its first step is not run again, and the caller's later retry
// with the same key replays the response.
func ExampleStore_CompleteStuck() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-completer")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := modernc.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE refunds (id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}
	drv, err := sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
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
	finished, failed, err := store.CompleteStuck(ctx, 5, refund)
	fmt.Println("completer:", finished, "finished,", failed, "given up,", err)
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
	// completer: 1 finished, 0 given up, <nil>
	// retry: already done, refunded order-1
	// refunds: 1 notifications: 1
}
