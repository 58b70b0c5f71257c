// Package modernc opens SQLite database files for sqlonce through
// modernc.org/sqlite, a SQLite in pure Go (no cgo). Importing it links
// that library and registers its database/sql driver, "sqlite"; the
// sqlitedriver package itself links no SQLite library, so that programs
// that use another one (mattn/go-sqlite3, see package
// sqlitedriver/mattn) do not pay for this one.
package modernc
