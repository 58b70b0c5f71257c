package pgsqldriver

import (
	"database/sql"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Capabilities: Run, ClaimBatch, Autocommit and OutboxListen (through
// pgx's stdlib driver; ErrNoRun otherwise).
func (e engine) Capabilities() driver.Capabilities[*sql.Tx] {
	return driver.Capabilities[*sql.Tx]{Runner: e, BatchClaimer: e, Autocommitter: e, OutboxListener: e}
}
