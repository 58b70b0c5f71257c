package sqlonce

import (
	"errors"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// IsCommitUnknown reports whether err, returned by a COMMIT, leaves the
// outcome unknown: it matches ErrCommitUnknown (sqlonce's own commits), or
// a driver the program links says that the connection broke while a
// statement may have been on its way (a reset or closed connection,
// io.ErrUnexpectedEOF, database/sql's driver.ErrBadConn,
// go-sql-driver/mysql's ErrInvalidConn), unless the driver knows that
// nothing was sent: a connection that could not be opened (a refused
// dial, pgx's ConnectError, PostgreSQL's 57P03 at startup) is a lost
// connection (ErrorType "conn_lost") and nothing more. Use it on the error
// of a transaction of yours that holds a dedupe claim, as sqlonce does on
// its own: when it is true, the transaction may have committed, and the
// answer is to send the request again with the same key, which replays or
// runs.
//
// A context that ends while COMMIT is under way also leaves the outcome
// unknown; the database libraries answer that with the context's error
// alone, which IsCommitUnknown cannot tell from a context that ended
// before COMMIT was sent. Only err from COMMIT means anything here: a lost
// connection during an earlier statement fails the transaction for sure.
func IsCommitUnknown(err error) bool {
	return errors.Is(err, ErrCommitUnknown) || driver.Classify(err).Has(driver.ConnLost) && !driver.Unsent(err)
}
