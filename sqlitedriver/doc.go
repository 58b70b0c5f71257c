// Package sqlitedriver is the sqlonce driver for SQLite through
// database/sql, with modernc.org/sqlite or github.com/mattn/go-sqlite3.
// Strategies built on it take the *sql.Tx the caller already has, and give
// the same results as on the server databases, on a database file the
// application embeds.
//
// A [Driver] is safe for concurrent use. Open the database with
// sqlitedriver/modernc or sqlitedriver/mattn, which configure it as
// sqlonce needs: a file (never ":memory:"), writing transactions begun
// IMMEDIATE, a busy timeout, WAL, foreign keys on, a capped pool. SQLite runs one writing transaction at a
// time: a duplicate of a key waits at BEGIN for the transaction holding
// it, and dedupe.WithNoWait has no effect. Retry a transaction while
// sqlonce.IsRetryable says so (SQLITE_BUSY, SQLITE_LOCKED).
//
// For unique.Insert, name the unique index (CREATE UNIQUE INDEX) and pass
// that name. sqlonce needs SQLite 3.42 or later. Configuration, clock and
// constraint names in detail:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#sqlite-sqlitedriver
package sqlitedriver
