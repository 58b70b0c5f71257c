package pgsqldriver

import (
	"database/sql"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Capabilities: Run, ClaimBatch and Autocommit.
func (e engine) Capabilities() driver.Capabilities[*sql.Tx] {
	return driver.Capabilities[*sql.Tx]{Runner: e, BatchClaimer: e, Autocommitter: e}
}
