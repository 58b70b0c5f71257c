package mysqldriver

import (
	"database/sql"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Capabilities: Run, ClaimBatch, Autocommit, and CheckClaim for a claim
// that vtgate can roll back with the caller's transaction.
func (e engine) Capabilities() driver.Capabilities[*sql.Tx] {
	return driver.Capabilities[*sql.Tx]{Runner: e, BatchClaimer: e, Autocommitter: e, ClaimChecker: e}
}
