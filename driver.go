package sqlonce

import "github.com/sqlonce/sqlonce/internal/driver"

// Driver connects the strategies to one database library. It is generic
// over the transaction type the caller already has: pgxdriver.New returns a
// Driver[pgx.Tx], mysqldriver.New and sqlitedriver.New a Driver[*sql.Tx]
// (sqlitedriver.New also returns an error: it refuses a *sql.DB of a
// SQLite library whose errors it does not recognise). The dialect is
// fixed by the driver chosen, never probed at run time.
//
// Only the drivers in this module implement Driver.
type Driver[TTx any] interface {
	// Engine returns the driver's implementation. Its type is internal:
	// it exists for sqlonce's own packages and is not part of the API.
	Engine() driver.Engine[TTx]
}
