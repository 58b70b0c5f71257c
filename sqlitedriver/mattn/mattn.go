package mattn

import (
	"database/sql"
	"fmt"
	"net/url"

	"github.com/sqlonce/sqlonce/internal/liteopen"
	"github.com/sqlonce/sqlonce/sqlitedriver"
)

// DriverName is the database/sql driver name mattn/go-sqlite3 registers.
const DriverName = "sqlite3"

// DSN returns the mattn/go-sqlite3 data source name for the database file
// at path with the settings the sqlitedriver package documentation
// describes: BEGIN IMMEDIATE (_txlock=immediate), a busy timeout of
// sqlitedriver.BusyTimeout (_busy_timeout), WAL (_journal_mode) and
// foreign keys (_foreign_keys), applied by the library on every
// connection it opens. Use it with sql.Open(DriverName, DSN(path)); Open
// does that and sets the pool. path is a file name, not a "file:" URI,
// and must not contain '?'.
func DSN(path string) string {
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Set("_busy_timeout", fmt.Sprint(sqlitedriver.BusyTimeout.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	return path + "?" + q.Encode()
}

// Open opens (creating it if needed) the SQLite database file at path,
// configured as sqlonce needs, with a pool of at most
// sqlitedriver.MaxOpenConns connections, and checks that it can be used.
// The program must import github.com/mattn/go-sqlite3; without it Open
// fails with database/sql's "unknown driver" error. Close it when done.
func Open(path string) (*sql.DB, error) {
	return liteopen.Open("sqlitedriver/mattn", DriverName, DSN(path), path)
}
