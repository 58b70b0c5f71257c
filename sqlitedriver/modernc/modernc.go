package modernc

import (
	"database/sql"
	"fmt"
	"net/url"

	// The database/sql driver "sqlite".
	_ "modernc.org/sqlite"

	"github.com/sqlonce/sqlonce/internal/liteopen"
	"github.com/sqlonce/sqlonce/sqlitedriver"
)

// DriverName is the database/sql driver name modernc.org/sqlite registers.
const DriverName = "sqlite"

// DSN returns the modernc.org/sqlite data source name for the database
// file at path with the settings the sqlitedriver package documentation
// describes: BEGIN IMMEDIATE, a busy timeout of sqlitedriver.BusyTimeout,
// WAL and foreign keys. Use it with sql.Open(DriverName, DSN(path)); Open
// does that and sets the pool. path is a file name, not a "file:" URI,
// and must not contain '?'.
func DSN(path string) string {
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqlitedriver.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	return path + "?" + q.Encode()
}

// Open opens (creating it if needed) the SQLite database file at path,
// configured as sqlonce needs (see the sqlitedriver package
// documentation), with a pool of at most sqlitedriver.MaxOpenConns
// connections, and checks that it can be used. Close it when done.
func Open(path string) (*sql.DB, error) {
	return liteopen.Open("sqlitedriver/modernc", DriverName, DSN(path), path)
}
