package driver

import (
	"errors"
	"fmt"
	"testing"
)

// errRefused stands for a driver's "the server takes no writes" error.
type errRefused struct{}

func (errRefused) Error() string { return "cannot execute INSERT in a read-only transaction" }

func init() {
	Register(ClassifierFunc(func(err error) Class {
		if _, ok := err.(errRefused); ok {
			return ReadOnly
		}
		return 0
	}))
}

func TestReadOnlyError(t *testing.T) {
	if ReadOnlyError(nil) != nil {
		t.Error("ReadOnlyError(nil) != nil")
	}
	other := errors.New("other")
	if got := ReadOnlyError(other); got != other {
		t.Errorf("ReadOnlyError(other) = %v, want it unchanged", got)
	}
	refused := fmt.Errorf("claim: %w", errRefused{})
	got := ReadOnlyError(refused)
	if !errors.Is(got, ErrReadOnly) || !errors.Is(got, refused) {
		t.Errorf("ReadOnlyError(%v) = %v: want ErrReadOnly with the original in the chain", refused, got)
	}
	if again := ReadOnlyError(got); again != got {
		t.Errorf("ReadOnlyError wrapped twice: %v", again)
	}
	joined := errors.Join(other, errRefused{})
	if !errors.Is(ReadOnlyError(joined), ErrReadOnly) {
		t.Error("a refused write joined to another error is not marked")
	}
}
