package sqlonce

import "github.com/sqlonce/sqlonce/internal/driver"

// Driver connects the strategies to one database library. It is generic
// over the transaction type the caller already has: pgxdriver.New returns a
// Driver[pgx.Tx], pgsqldriver.New, mysqldriver.New and sqlitedriver.New a
// Driver[*sql.Tx]. Each New returns an error matching ErrInvalidArgument
// for a nil handle or an invalid option. The dialect is fixed by the
// driver chosen. A database/sql driver given a handle or a transaction of
// another database refuses it with ErrInvalidArgument: at New when the
// handle's database/sql driver is a known library's, or, for one it does
// not know (a wrapper), from one probe of the server at the first call.
//
// Only the drivers in this module implement Driver.
type Driver[TTx any] interface {
	// Engine returns the driver's implementation. Its type is internal:
	// it exists for sqlonce's own packages and is not part of the API.
	Engine() driver.Engine[TTx]
}
