package sqlonce

import "github.com/sqlonce/sqlonce/internal/driver"

// Driver connects the strategies to one database library. It is generic
// over the transaction type the caller already has: pgxdriver.New returns a
// Driver[pgx.Tx], pgsqldriver.New, mysqldriver.New and sqlitedriver.New a
// Driver[*sql.Tx] (sqlitedriver.New also returns an error: it refuses a
// *sql.DB of a SQLite library whose errors it does not recognise). The
// dialect is fixed by the driver chosen. A database/sql driver given a
// handle or a transaction of another database refuses it with
// ErrInvalidArgument: known at New from the handle's database/sql driver,
// or, for one it does not know and for a driver built with nil, from one
// probe of the server at the first call.
//
// Only the drivers in this module implement Driver.
type Driver[TTx any] interface {
	// Engine returns the driver's implementation. Its type is internal:
	// it exists for sqlonce's own packages and is not part of the API.
	Engine() driver.Engine[TTx]
}
