package liteopen

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// BusyTimeout is how long a transaction waits for another transaction's
// write lock before SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// MaxOpenConns is the pool size Open sets.
const MaxOpenConns = 16

// CheckPath refuses what cannot be a shared database file carrying DSN
// settings after a '?'. pkg names the caller in the error.
func CheckPath(pkg, path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%s: empty database path", pkg)
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return fmt.Errorf("%s: %q: Open takes a file name (each pooled connection to an in-memory database is a database of its own)", pkg, path)
	case strings.ContainsRune(path, '?'):
		return fmt.Errorf("%s: %q: a file name with '?' cannot carry the settings", pkg, path)
	}
	return nil
}

// Open opens path with the database/sql driver driverName and dsn, sets
// the pool to MaxOpenConns and checks that the file is usable in WAL
// mode. pkg names the caller in errors.
func Open(pkg, driverName, dsn, path string) (*sql.DB, error) {
	if err := CheckPath(pkg, path); err != nil {
		return nil, err
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
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
		return nil, fmt.Errorf("%s: open %s: %w", pkg, path, err)
	}
	if mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("%s: open %s: journal mode is %q, not wal", pkg, path, mode)
	}
	return db, nil
}
