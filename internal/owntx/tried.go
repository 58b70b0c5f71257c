package owntx

import (
	"context"
	"errors"

	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// RunObserved is Run that counts its attempts, and the errors that made
// it retry, in op.
func RunObserved[TTx any](ctx context.Context, e driver.Engine[TTx], op *obs.Op, fn func(ctx context.Context, tx TTx) error) error {
	if !op.On() {
		return Run(ctx, e, fn)
	}
	return Retry(ctx, func() error {
		err := e.InTx(ctx, fn)
		op.Tried(err)
		return err
	})
}

// RunStatements is RunObserved for fn whose statements need no transaction
// around them (see driver.Autocommitter): with a, e's
// Capabilities.Autocommitter (nil: e has none), they run in autocommit,
// which saves the BEGIN and COMMIT round trips.
func RunStatements[TTx any](ctx context.Context, e driver.Engine[TTx], a driver.Autocommitter[TTx], op *obs.Op, fn func(ctx context.Context, tx TTx) error) error {
	if a == nil {
		return RunObserved(ctx, e, op, fn)
	}
	err := Retry(ctx, func() error {
		err := a.Autocommit(ctx, fn)
		if !errors.Is(err, driver.ErrNoRun) {
			op.Tried(err)
		}
		return err
	})
	if errors.Is(err, driver.ErrNoRun) {
		return RunObserved(ctx, e, op, fn)
	}
	return err
}
