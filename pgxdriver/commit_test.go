package pgxdriver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// A COMMIT's error leaves the outcome unknown unless the server's answer
// tells it: an error of the transaction (a constraint checked at commit,
// the ROLLBACK of an aborted one) is known; a lost connection, and an
// answer that ends the session (57P01: the backend terminated, perhaps
// after it committed locally while it waited for a synchronous standby),
// are not. The checker met 57P01 at a COMMIT the network had dropped.
func TestCommitError(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		live    bool
		unknown bool
	}{
		{"constraint at commit", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, true, false},
		{"serialization at commit", &pgconn.PgError{Severity: "ERROR", Code: "40001"}, true, false},
		{"aborted transaction", pgx.ErrTxCommitRollback, true, false},
		{"closed tx", pgx.ErrTxClosed, true, false},
		{"connection lost", io.ErrUnexpectedEOF, true, true},
		{"context ended before", io.ErrUnexpectedEOF, false, false},
		{"admin shutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true, true},
		{"admin shutdown, wrapped", fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}), true, true},
		{"crash shutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P02"}, true, true},
		// Nothing sent: the connection could not be opened.
		{"dial refused", fmt.Errorf("acquire: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true, false},
		{"cannot connect now", &pgconn.PgError{Severity: "FATAL", Code: "57P03"}, true, false},
		{"dial refused joined to a reset", errors.Join(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, &net.OpError{Op: "read", Err: syscall.ECONNRESET}), true, true},
	} {
		got := commitError(c.err, c.live)
		if unknown := errors.Is(got, driver.ErrCommitUnknown); unknown != c.unknown {
			t.Errorf("%s: %v: unknown %v, want %v", c.name, got, unknown, c.unknown)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s: %v lost the original error", c.name, got)
		}
	}
	if commitError(nil, true) != nil {
		t.Error("commitError(nil) != nil")
	}
}
