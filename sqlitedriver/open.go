package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	// The database/sql driver "sqlite".
	_ "modernc.org/sqlite"
)

// DriverName is the database/sql driver name modernc.org/sqlite registers.
const DriverName = "sqlite"

// BusyTimeout is how long a transaction that Open's database begins waits
// for another transaction's write lock before SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// MaxOpenConns is the pool size Open sets.
const MaxOpenConns = 16

// DSN returns the modernc.org/sqlite data source name for the database
// file at path with the settings the package documentation describes:
// BEGIN IMMEDIATE, a busy timeout of BusyTimeout, WAL and foreign keys.
// Use it with sql.Open(DriverName, DSN(path)); Open does that and sets the
// pool. path is a file name, not a "file:" URI, and must not contain '?'.
func DSN(path string) string {
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	return path + "?" + q.Encode()
}

// Open opens (creating it if needed) the SQLite database file at path,
// configured as sqlonce needs (see the package documentation), with a pool
// of at most MaxOpenConns connections, and checks that it can be used.
// Close it when done.
func Open(path string) (*sql.DB, error) {
	switch {
	case path == "":
		return nil, errors.New("sqlitedriver: empty database path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("sqlitedriver: %q: Open takes a file name (each pooled connection to an in-memory database is a database of its own)", path)
	case strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("sqlitedriver: %q: a file name with '?' cannot carry the settings", path)
	}
	db, err := sql.Open(DriverName, DSN(path))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(MaxOpenConns)
	db.SetMaxIdleConns(MaxOpenConns)
	ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout)
	defer cancel()
	// journal_mode=WAL is applied by the first connection; a file that
	// cannot be opened or written fails here rather than at first use.
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitedriver: open %s: %w", path, err)
	}
	if mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("sqlitedriver: open %s: journal mode is %q, not wal", path, mode)
	}
	return db, nil
}
