package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// An error of sqlonce's own statements in Run and RunBatch names the key
// (the batch); fn's own error comes back as fn returned it.
func TestRunErrorsNameTheKey(t *testing.T) {
	ctx := context.Background()
	db, err := modernc.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	drv, err := sqlitedriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err = store.Run(ctx, dedupe.Request{Scope: "s", Key: "k1"}, func(context.Context, *sql.Tx) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) || strings.Contains(err.Error(), "run key") {
		t.Fatalf("fn's error: %v", err)
	}
	_, err = store.RunBatch(ctx, "s", []string{"b1", "b2"}, func(context.Context, *sql.Tx, []string) error { return boom })
	if !errors.Is(err, boom) || strings.Contains(err.Error(), "batch") {
		t.Fatalf("fn's error in a batch: %v", err)
	}

	db.Close() // every statement of sqlonce's fails now
	ran := false
	_, err = store.Run(ctx, dedupe.Request{Scope: "s", Key: "k2"}, func(context.Context, *sql.Tx) ([]byte, error) { ran = true; return nil, nil })
	if err == nil || ran || !strings.Contains(err.Error(), `run key "k2"`) || !errors.Is(err, sql.ErrConnDone) && !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Run on a closed handle: %v (fn ran: %v), want the key named", err, ran)
	}
	_, err = store.RunBatch(ctx, "s", []string{"b3", "b4"}, func(context.Context, *sql.Tx, []string) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), `a batch of 2 keys in scope "s"`) {
		t.Fatalf("RunBatch on a closed handle: %v (fn ran: %v), want the batch named", err, ran)
	}
}
