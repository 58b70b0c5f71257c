package modernc_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// Open refuses what cannot be a shared database file, and what it opens
// has the settings the package documentation promises, on every pooled
// connection.
func TestOpen(t *testing.T) {
	for _, bad := range []string{"", ":memory:", "file:x.db?mode=memory", "a?b.db"} {
		if db, err := modernc.Open(bad); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}

	db, err := modernc.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != sqlitedriver.MaxOpenConns {
		t.Errorf("pool of %d connections, want %d", got, sqlitedriver.MaxOpenConns)
	}
	ctx := context.Background()
	// Hold several connections at once, so that the checks see more than
	// the first one.
	for i := range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var mode string
		var busy, fk int64
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || time.Duration(busy)*time.Millisecond != sqlitedriver.BusyTimeout || fk != 1 {
			t.Errorf("connection %d: journal_mode %s, busy_timeout %dms, foreign_keys %d", i, mode, busy, fk)
		}
	}
	if dsn := modernc.DSN("x.db"); !strings.Contains(dsn, "_txlock=immediate") {
		t.Errorf("DSN %q does not begin transactions IMMEDIATE", dsn)
	}
}
