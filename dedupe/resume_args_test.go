package dedupe_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// ResumeStuck and ResumeEvery refuse bad input before any SQL runs,
// two operations of one name among it.
func TestResumerArguments(t *testing.T) {
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
	step := func(context.Context, *sql.Tx, dedupe.StepState) ([]byte, error) { return nil, nil }
	op := func(name string) *dedupe.Operation[*sql.Tx] {
		return &dedupe.Operation[*sql.Tx]{Name: name, Steps: []dedupe.Step[*sql.Tx]{{Name: "a", InTx: step}}}
	}
	for name, ops := range map[string][]*dedupe.Operation[*sql.Tx]{
		"nil":       {nil},
		"no name":   {op("")},
		"same name": {op("x"), op("y"), op("x")},
	} {
		if _, _, err := store.ResumeStuck(ctx, 3, ops...); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("ResumeStuck, %s: %v, want ErrInvalidArgument", name, err)
		}
		// Accepted, it would run until ctx is done.
		every, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := store.ResumeEvery(every, time.Second, 3, ops...); !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("ResumeEvery, %s: %v, want ErrInvalidArgument", name, err)
		}
		cancel()
	}
	if _, _, err := store.ResumeStuck(ctx, 0, op("x")); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("ResumeStuck, 0 attempts: %v", err)
	}
	if err := store.ResumeEvery(ctx, time.Microsecond, 3, op("x")); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("ResumeEvery, 1µs: %v", err)
	}
	if _, _, err := store.ResumeStuck(ctx, 3, op("x"), op("y")); err != nil {
		t.Errorf("ResumeStuck of two operations: %v", err)
	}
}
