package pgxdriver

import (
	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Capabilities: Run and RunBatch pipeline BEGIN with their first
// statements; ClaimBatch claims a batch in one statement; Autocommit runs
// a lease's statements without a transaction; OutboxListen wakes an
// outbox relay by LISTEN/NOTIFY.
func (e engine) Capabilities() driver.Capabilities[pgx.Tx] {
	return driver.Capabilities[pgx.Tx]{Runner: e, BatchClaimer: e, BatchRunner: e, Autocommitter: e, OutboxListener: e}
}
