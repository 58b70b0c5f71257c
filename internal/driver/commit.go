package driver

import (
	"context"
	"errors"
	"fmt"
)

// ErrCommitUnknown is sqlonce.ErrCommitUnknown, declared here so that the
// helpers below, which the root package cannot serve, can wrap it.
var ErrCommitUnknown = errors.New("sqlonce: connection lost at commit; the outcome is unknown, retry with the same key")

// CommitError returns err, the error of a COMMIT that sqlonce sent
// itself, marked with ErrCommitUnknown when the transaction may have
// committed after all: the connection broke while COMMIT was under way
// (ConnLost), or ctx, live when COMMIT was sent (live), ended during it,
// which makes the database library cut the connection and answer with the
// context's error. The original error stays in the chain. A context that
// had ended before COMMIT was sent is known to have rolled back, and so is
// an error that sent nothing (Unsent: the connection could not be
// opened).
func CommitError(err error, live bool) error {
	if err == nil || Unsent(err) {
		return err
	}
	if IsConnLost(err) || (live && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))) {
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	}
	return err
}
