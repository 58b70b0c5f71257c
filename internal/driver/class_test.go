package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// TestUnsent: a lost connection sent nothing only when every lost
// connection of the tree is inside an error that says so (a refused
// dial); CommitError then leaves it a lost connection, not
// ErrCommitUnknown.
func TestUnsent(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		name   string
		err    error
		unsent bool
	}{
		{"dial refused", refused, true},
		{"dial refused, wrapped", fmt.Errorf("claim: %w", refused), true},
		{"reset", reset, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, false},
		{"refused joined to a reset", errors.Join(refused, reset), false},
		{"refused joined to a plain error", errors.Join(errors.New("x"), refused), true},
		{"plain", errors.New("x"), false},
		{"nil", nil, false},
	} {
		if got := Unsent(c.err); got != c.unsent {
			t.Errorf("%s: Unsent(%v) = %v, want %v", c.name, c.err, got, c.unsent)
		}
		if c.err == nil {
			continue
		}
		unknown := errors.Is(CommitError(c.err, true), ErrCommitUnknown)
		if want := IsConnLost(c.err) && !c.unsent; unknown != want {
			t.Errorf("%s: CommitError unknown %v, want %v", c.name, unknown, want)
		}
	}
}
