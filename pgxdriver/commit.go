package pgxdriver

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// commitError returns err, the error of a COMMIT that sqlonce sent (alone,
// or last in a batch), marked with driver.ErrCommitUnknown unless the
// outcome is known: the server answered (a *pgconn.PgError other than
// one ending the session, or the ROLLBACK an aborted transaction answers
// COMMIT with), the Tx was already
// closed, nothing was sent (driver.Unsent: the connection could not be
// opened), or ctx had ended before COMMIT was to be sent (live false: pgx
// checks the context before it sends). Every other error leaves it unknown, not only a
// network error: when the connection breaks while a batch's results are
// read, pgx reports the results after the first as "conn closed", the
// error it also gives before sending anything.
func commitError(err error, live bool) error {
	if err == nil || driver.Unsent(err) {
		return err
	}
	answered := driver.Walk(err, func(e error) bool {
		_, ok := e.(*pgconn.PgError)
		return ok
	})
	// A server that ends the session (57P01 when a backend is terminated,
	// 57P02, 57P03) answers so whether or not the COMMIT went through: a
	// backend terminated while it waits for a synchronous standby has
	// committed locally, and one terminated before the COMMIT reached it
	// has not.
	if answered && !driver.IsConnLost(err) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	if !live {
		return err // the context ended first: pgx sends nothing then
	}
	return fmt.Errorf("%w: %w", driver.ErrCommitUnknown, err)
}
