package main

import (
	"context"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// batchReporter returns d with an engine that calls committed with the
// rows each purge batch deleted, once its transaction committed: dedupe's
// and token's Purge run their batches themselves, and a batch that a
// conflict rolled back and that is taken up again counts once.
func batchReporter[TTx any](d sqlonce.Driver[TTx], committed func(n int64)) sqlonce.Driver[TTx] {
	return reportingDriver[TTx]{&reportingEngine[TTx]{Engine: d.Engine(), committed: committed}}
}

type reportingDriver[TTx any] struct{ e *reportingEngine[TTx] }

func (d reportingDriver[TTx]) Engine() driver.Engine[TTx] { return d.e }

// reportingEngine is used by one purge at a time: its batches run one
// after the other, each in a transaction of InTx.
type reportingEngine[TTx any] struct {
	driver.Engine[TTx]
	committed func(n int64)
	pending   int64
}

func (e *reportingEngine[TTx]) InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	e.pending = 0
	err := e.Engine.InTx(ctx, fn)
	if err == nil {
		e.committed(e.pending)
	}
	return err
}

func (e *reportingEngine[TTx]) Purge(ctx context.Context, tx TTx, limit int, now time.Time) (int64, error) {
	n, err := e.Engine.Purge(ctx, tx, limit, now)
	e.pending += n
	return n, err
}

func (e *reportingEngine[TTx]) TokenPurge(ctx context.Context, tx TTx, limit int, now time.Time) (int64, error) {
	n, err := e.Engine.TokenPurge(ctx, tx, limit, now)
	e.pending += n
	return n, err
}
