package owntx

import (
	"context"

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
