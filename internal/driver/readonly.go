package driver

import (
	"errors"
	"fmt"
)

// ErrReadOnly is sqlonce.ErrReadOnly, declared here so that
// ReadOnlyError can wrap it: the root package imports this one.
var ErrReadOnly = errors.New("sqlonce: the server refuses writes (a hot standby, a read-only replica or a read-only transaction); route sqlonce, and the transaction it joins, to the primary")

// ReadOnlyError returns err marked with ErrReadOnly when a database error
// of its tree says that the server refuses writes (ReadOnly), and err
// unchanged otherwise. The original error stays in the chain. Every
// strategy's operation passes its error through it on the way out.
func ReadOnlyError(err error) error {
	if err == nil || errors.Is(err, ErrReadOnly) || !Classify(err).Has(ReadOnly) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrReadOnly, err)
}
