package sqlonce

import (
	"errors"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// IsRetryable reports whether err means "roll the transaction back and run
// it again from the start": a serialization failure (PostgreSQL 40001;
// MariaDB 1020 "Record has changed since last read", under
// innodb_snapshot_isolation=ON, its default from 11.6), a deadlock
// (PostgreSQL 40P01, MySQL 1213), a lock wait that gave up (PostgreSQL
// 55P03, MySQL 1205), SQLite's SQLITE_BUSY (the write lock stayed taken
// for busy_timeout, or a DEFERRED transaction wrote on a stale snapshot,
// SQLITE_BUSY_SNAPSHOT) and SQLITE_LOCKED, or ErrStaleRead.
//
// It recognises errors from the caller's own queries as well as from
// sqlonce, for the database libraries of the drivers the program links:
// each driver package (pgxdriver, pgsqldriver, mysqldriver, sqlitedriver) teaches it
// its library's errors when imported, and the root package links no
// database library itself. A program that imports only pgxdriver gets
// false for a MySQL deadlock, which it cannot meet.
//
// It looks at every error of a wrapped or joined tree (errors.Join,
// fmt.Errorf with several %w), not the first database error alone: a
// duplicate key joined to the deadlock that rolled the transaction back
// is retryable. After such an error the transaction must not be
// committed: on PostgreSQL it is aborted, on MySQL a deadlock has already
// rolled it back.
//
// It is false for an error matching ErrCommitUnknown, whatever else the
// tree holds: that transaction may have committed, and running it again
// could do its work twice; send the request again with the same key
// instead.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrCommitUnknown) {
		return false
	}
	return errors.Is(err, ErrStaleRead) || driver.Classify(err).Has(driver.Retryable)
}
