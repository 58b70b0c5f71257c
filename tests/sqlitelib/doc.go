// Package sqlitelib tests sqlitedriver on the SQLite libraries it
// supports and the ones it refuses: the errors mattn/go-sqlite3 returns
// from a real database are classified as modernc.org/sqlite's are,
// mattn.Open configures every pooled connection, and sqlitedriver.New
// refuses a *sql.DB of PostgreSQL or MariaDB with ErrInvalidArgument.
package sqlitelib
