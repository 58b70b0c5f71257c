package dedupe_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// shortBatch is a real SQLite engine whose batch claim has a bug: it
// answers one claim fewer than it was given keys.
type shortBatch struct{ driver.Engine[*sql.Tx] }

// Capabilities are the engine's, with this ClaimBatch in place of its.
func (e shortBatch) Capabilities() driver.Capabilities[*sql.Tx] {
	c := e.Engine.Capabilities()
	c.BatchClaimer = e
	return c
}

func (e shortBatch) ClaimBatch(ctx context.Context, tx *sql.Tx, p driver.BatchParams) ([]driver.BatchClaim, error) {
	return make([]driver.BatchClaim, len(p.Keys)-1), nil
}

type shortDriver struct{ e driver.Engine[*sql.Tx] }

func (d shortDriver) Engine() driver.Engine[*sql.Tx] { return shortBatch{d.e} }

// A driver whose batch claim answers for fewer keys than it was given
// makes DoBatch fail, without running fn, rather than panic.
func TestDoBatchDriverShortAnswer(t *testing.T) {
	ctx := context.Background()
	db, err := modernc.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	real, err := sqlitedriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New[*sql.Tx](shortDriver{real.Engine()})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ran := false
	_, err = store.DoBatch(ctx, tx, "s", []string{"a", "b", "c"}, func(context.Context, []string) error {
		ran = true
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "answered 2 claims") {
		t.Fatalf("DoBatch = %v, want the driver's short answer", err)
	}
	if ran {
		t.Fatal("fn ran")
	}
}
