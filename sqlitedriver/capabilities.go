package sqlitedriver

import (
	"database/sql"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Capabilities: ClaimBatch, Autocommit, and IsDuplicateInTx, since SQLite
// names a duplicate's columns, not its constraint. No Runner: Run claims
// inside a transaction of its own.
func (e engine) Capabilities() driver.Capabilities[*sql.Tx] {
	return driver.Capabilities[*sql.Tx]{BatchClaimer: e, Autocommitter: e, DuplicateInTx: e}
}
