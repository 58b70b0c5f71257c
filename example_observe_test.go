package sqlonce_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

// Observe attaches an Observer to a driver once: every strategy built on
// it reports its operations. SlogObserver logs them; first runs at Debug,
// repeats at Info. The key ("pay-1") is never logged.
func ExampleSlogObserver() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		// Stable output for the example: no times, no durations.
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "duration", "wait", "work":
				return slog.Attr{}
			}
			return a
		},
	}))
	observed := sqlonce.Observe(drv, sqlonce.SlogObserver(logger))
	store, err := dedupe.New(observed)
	if err != nil {
		panic(err)
	}
	for range 2 {
		_, err := store.Run(ctx, dedupe.Request{Scope: "payments", Key: "pay-1"},
			func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ('pay-1', 10)")
				return []byte("ok"), err
			})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// level=DEBUG msg=sqlonce strategy=dedupe operation=Run scope=payments status=first_run response_size=2
	// level=INFO msg=sqlonce strategy=dedupe operation=Run scope=payments status=replayed response_size=2
}

// An Observer is any type with an Observe method, or a function made one
// with ObserverFunc. It gets an Event per operation.
func ExampleObserverFunc() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()
	counts := map[sqlonce.EventStatus]int{} // one goroutine here; guard it otherwise
	obs := sqlonce.ObserverFunc(func(ctx context.Context, e sqlonce.Event) {
		counts[e.Status]++
	})
	store, err := dedupe.New(sqlonce.Observe(drv, obs))
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"a", "b", "a", "a"} {
		_, err := store.Run(ctx, dedupe.Request{Scope: "jobs", Key: key},
			func(ctx context.Context, tx *sql.Tx) ([]byte, error) { return nil, nil })
		if err != nil {
			panic(err)
		}
	}
	fmt.Println(sqlonce.EventFirstRun, counts[sqlonce.EventFirstRun])
	fmt.Println(sqlonce.EventReplayed, counts[sqlonce.EventReplayed])
	// Output:
	// first_run 2
	// replayed 2
}
