package sqlitelib

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// A handle opened the usual way, sql.Open("sqlite", path), has no busy
// timeout (modernc.org/sqlite) or begins its transactions DEFERRED (both
// libraries): 16 goroutines racing on 30 keys then failed 450 of 480
// Store.Run calls with SQLITE_BUSY on modernc, and a caller's transaction
// that reads before it writes fails with SQLITE_BUSY_SNAPSHOT on mattn.
// sqlitedriver.New refuses such a handle, naming the Open functions; a
// handle it accepts runs the race without a single SQLITE_BUSY and does
// each key's work once.
func TestPlainOpenRefusedOrRaces(t *testing.T) {
	for _, c := range []struct {
		name, driver string
		dsn          func(path string) string
		// setup runs on the handle before New (a PRAGMA run on the
		// handle reaches one pooled connection only).
		setup  string
		open   func(path string) (*sql.DB, error)
		refuse string // what New's error names, "" when it accepts
	}{
		{name: "modernc/plain", driver: modernc.DriverName, refuse: "busy_timeout 0"},
		{name: "mattn/plain", driver: mattn.DriverName, refuse: "DEFERRED"},
		{name: "modernc/busy timeout only", driver: modernc.DriverName, dsn: func(p string) string { return p + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" }, refuse: "DEFERRED"},
		{name: "mattn/busy timeout only", driver: mattn.DriverName, dsn: func(p string) string { return p + "?_busy_timeout=10000&_journal_mode=WAL" }, refuse: "DEFERRED"},
		{name: "modernc/immediate without busy timeout", driver: modernc.DriverName, dsn: func(p string) string { return p + "?_txlock=immediate" }, refuse: "busy_timeout 0"},
		{name: "mattn/immediate without busy timeout", driver: mattn.DriverName, dsn: func(p string) string { return p + "?_txlock=immediate&_busy_timeout=0" }, refuse: "busy_timeout 0"},
		{name: "modernc/busy timeout by PRAGMA on one connection", driver: modernc.DriverName, dsn: func(p string) string { return p + "?_txlock=immediate" }, setup: "PRAGMA busy_timeout = 10000", refuse: "busy_timeout 0"},
		{name: "modernc/DSN", driver: modernc.DriverName, dsn: modernc.DSN},
		{name: "mattn/DSN", driver: mattn.DriverName, dsn: mattn.DSN},
		{name: "modernc/Open", open: modernc.Open},
		{name: "mattn/Open", open: mattn.Open},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "t.db")
			var db *sql.DB
			var err error
			if c.open != nil {
				db, err = c.open(path)
			} else {
				dsn := path
				if c.dsn != nil {
					dsn = c.dsn(path)
				}
				db, err = sql.Open(c.driver, dsn)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE effects (k TEXT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			if c.setup != "" {
				if _, err := db.ExecContext(ctx, c.setup); err != nil {
					t.Fatal(err)
				}
			}
			drv, err := sqlitedriver.New(db)
			if c.refuse != "" {
				if err == nil {
					// Show what accepting it costs.
					t.Errorf("New accepted the handle; want ErrInvalidArgument naming %q", c.refuse)
					race(t, db, drv)
					return
				}
				if !errors.Is(err, sqlonce.ErrInvalidArgument) || drv != nil {
					t.Fatalf("New = %v, %v; want ErrInvalidArgument", drv, err)
				}
				for _, want := range []string{c.refuse, "modernc.Open", "mattn.Open", "modernc.DSN", "mattn.DSN"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%q does not name %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			race(t, db, drv)
		})
	}
}

// race runs 16 goroutines over the same 30 keys, each key through
// Store.Run and through a caller's transaction that reads before it
// claims the key (Store.Do), and wants no error at all and each key's
// effect once.
func race(t *testing.T, db *sql.DB, drv *sqlitedriver.Driver) {
	t.Helper()
	ctx := context.Background()
	s, err := dedupe.New(drv)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, keys = 16, 30
	var failed, busy atomic.Int64
	var firstErr atomic.Pointer[error]
	fail := func(err error) {
		failed.Add(1)
		if sqlonce.IsRetryable(err) {
			busy.Add(1)
		}
		firstErr.CompareAndSwap(nil, &err)
	}
	effect := func(ctx context.Context, tx *sql.Tx, k string) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (k) VALUES (?)", k)
		return err
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := fmt.Sprint(i)
				if (g+i)%2 == 0 {
					_, err := s.Run(ctx, dedupe.Request{Scope: "race", Key: k}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
						return nil, effect(ctx, tx, k)
					})
					if err != nil {
						fail(err)
					}
					continue
				}
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					var n int
					if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM effects").Scan(&n); err != nil {
						return err
					}
					if _, err := s.Do(ctx, tx, dedupe.Request{Scope: "race", Key: k}, func(ctx context.Context) error {
						return effect(ctx, tx, k)
					}); err != nil {
						return err
					}
					return tx.Commit()
				}()
				if err != nil {
					fail(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d calls failed, %d of them retryable (SQLITE_BUSY); first: %v", n, goroutines*keys, busy.Load(), *firstErr.Load())
	}
	rows, err := db.QueryContext(ctx, "SELECT k, count(*) FROM effects GROUP BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("key %s: effect done %d times", k, n)
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != keys {
		t.Errorf("%d keys' effects, want %d", seen, keys)
	}
}
