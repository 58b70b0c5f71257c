package driver

import (
	"context"
	"database/sql"
	"reflect"
	"testing"
)

// allCaps is an engine with every capability; each records its call.
type allCaps struct {
	Engine[*sql.Tx] // nil: only the capabilities are called
	called          map[string]bool
}

func (e allCaps) Capabilities() Capabilities[*sql.Tx] {
	return Capabilities[*sql.Tx]{Runner: e, BatchClaimer: e, BatchRunner: e, Autocommitter: e, DuplicateInTx: e, ClaimChecker: e, OutboxListener: e}
}

func (e allCaps) Run(context.Context, RunParams, func(context.Context, *sql.Tx) ([]byte, error)) (RunResult, error) {
	e.called["Runner"] = true
	return RunResult{}, nil
}

func (e allCaps) ClaimBatch(context.Context, *sql.Tx, BatchParams) ([]BatchClaim, error) {
	e.called["BatchClaimer"] = true
	return nil, nil
}

func (e allCaps) RunBatch(context.Context, BatchParams, func(context.Context, *sql.Tx, []BatchClaim) error) error {
	e.called["BatchRunner"] = true
	return nil
}

func (e allCaps) Autocommit(context.Context, func(context.Context, *sql.Tx) error) error {
	e.called["Autocommitter"] = true
	return nil
}

func (e allCaps) IsDuplicateInTx(context.Context, *sql.Tx, error, string) (bool, error) {
	e.called["DuplicateInTx"] = true
	return false, nil
}

func (e allCaps) CheckClaim(context.Context, *sql.Tx, Key, int64) error {
	e.called["ClaimChecker"] = true
	return nil
}

func (e allCaps) OutboxListen(context.Context, func(), func()) error {
	e.called["OutboxListener"] = true
	return nil
}

// noCaps is an engine without capabilities.
type noCaps struct{ Engine[*sql.Tx] }

func (noCaps) Capabilities() Capabilities[*sql.Tx] { return Capabilities[*sql.Tx]{} }

// TestCheckedKeepsCapabilities: an engine wrapped in Checked keeps every
// capability of the engine it wraps, and each reaches the engine's. A
// capability added to Capabilities that allCaps lacks fails the test.
func TestCheckedKeepsCapabilities(t *testing.T) {
	inner := allCaps{called: map[string]bool{}}
	in := reflect.ValueOf(inner.Capabilities())
	for i := range in.NumField() {
		if in.Field(i).IsNil() {
			t.Fatalf("allCaps lacks capability %s: add it", in.Type().Field(i).Name)
		}
	}
	caps := Checked{Engine: inner, DB: new(sql.DB)}.Capabilities()
	out := reflect.ValueOf(caps)
	for i := range out.NumField() {
		if out.Field(i).IsNil() {
			t.Errorf("Checked lost capability %s", out.Type().Field(i).Name)
		}
	}
	if t.Failed() {
		return
	}
	ctx := context.Background()
	caps.Runner.Run(ctx, RunParams{}, nil)
	caps.BatchClaimer.ClaimBatch(ctx, nil, BatchParams{})
	caps.BatchRunner.RunBatch(ctx, BatchParams{}, nil)
	caps.Autocommitter.Autocommit(ctx, nil)
	caps.DuplicateInTx.IsDuplicateInTx(ctx, nil, nil, "")
	caps.ClaimChecker.CheckClaim(ctx, nil, Key{}, 0)
	caps.OutboxListener.OutboxListen(ctx, nil, nil)
	for i := range out.NumField() {
		if name := out.Type().Field(i).Name; !inner.called[name] {
			t.Errorf("Checked's %s does not reach the engine's", name)
		}
	}

	// And an engine without capabilities has none through Checked.
	none := reflect.ValueOf(Checked{Engine: noCaps{}, DB: new(sql.DB)}.Capabilities())
	for i := range none.NumField() {
		if !none.Field(i).IsNil() {
			t.Errorf("Checked adds capability %s", none.Type().Field(i).Name)
		}
	}
}
