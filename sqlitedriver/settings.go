package sqlitedriver

import "github.com/sqlonce/sqlonce/internal/liteopen"

// BusyTimeout is how long a transaction that a database opened by
// sqlitedriver/modernc or sqlitedriver/mattn begins waits for another
// transaction's write lock before SQLITE_BUSY.
const BusyTimeout = liteopen.BusyTimeout

// MaxOpenConns is the pool size those packages' Open sets.
const MaxOpenConns = liteopen.MaxOpenConns
