// Package liteopen opens a SQLite database file as sqlonce needs it,
// whichever SQLite library's database/sql driver the caller names. It
// links no SQLite library: sqlitedriver/modernc and sqlitedriver/mattn
// pass their own DSN.
package liteopen
