package sqlitedriver_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// New's settings probe takes its connections before it begins its
// transaction (which, IMMEDIATE, takes the write lock): with the pool's
// connections in use by the application it waits for a slot holding no
// lock, so that another handle's writes do not wait for New. (Begun
// first, the transaction held the write lock while New waited 5 s for a
// second connection.)
func TestNewHoldsNoLockWhileWaitingForTheProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := modernc.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	other, err := modernc.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	if _, err := other.ExecContext(ctx, "CREATE TABLE w (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	// The application holds one of the pool's two connections.
	held, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	var done atomic.Bool
	newErr := make(chan error, 1)
	go func() {
		_, err := sqlitedriver.New(db)
		done.Store(true)
		newErr <- err
	}()
	// The other handle writes while New runs, and once after.
	var worst time.Duration
	for writes := 0; ; writes++ {
		start := time.Now()
		if _, err := other.ExecContext(ctx, "INSERT INTO w VALUES (1)"); err != nil {
			t.Fatalf("write: %v", err)
		}
		worst = max(worst, time.Since(start))
		if done.Load() && writes > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-newErr:
		if err != nil {
			t.Fatalf("New: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New did not return")
	}
	t.Logf("the other handle's longest write took %v", worst)
	if worst > 2*time.Second {
		t.Fatalf("a write on another handle waited %v for New's probe", worst)
	}
}
