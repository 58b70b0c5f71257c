package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// savepoints names savepoints uniquely: MySQL silently replaces an older
// savepoint of the same name, and nested guards must never release or roll
// back to one another's.
var savepoints atomic.Uint64

// SavepointName returns a savepoint name that no other savepoint of this
// process has.
func SavepointName() string {
	return fmt.Sprintf("sqlonce_sp_%d", savepoints.Add(1))
}

// SavepointEnd says what SQLSavepoint does with its savepoint once fn
// returned.
type SavepointEnd uint8

const (
	// ReleaseOnSuccess releases the savepoint after fn succeeded and
	// leaves it after ROLLBACK TO (which keeps it).
	ReleaseOnSuccess SavepointEnd = iota
	// ReleaseAlways releases it after ROLLBACK TO too.
	ReleaseAlways
	// ReleaseNever leaves it for COMMIT to release either way.
	ReleaseNever
)

// SQLSavepoint runs fn under a savepoint of tx and rolls back to it if fn
// fails; end says whether it releases the savepoint. The statements are
// not sqlc queries: sqlc parses no SAVEPOINT, and a savepoint name cannot
// be a parameter.
func SQLSavepoint(ctx context.Context, tx *sql.Tx, end SavepointEnd, fn func(ctx context.Context) error) error {
	name := SavepointName()
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return err
	}
	if err := fn(ctx); err != nil {
		if _, rbErr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+name); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		if end == ReleaseAlways {
			if _, rbErr := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name); rbErr != nil {
				return errors.Join(err, fmt.Errorf("release savepoint: %w", rbErr))
			}
		}
		return err
	}
	if end == ReleaseNever {
		return nil
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
	return err
}

// OpenSavepoints remembers the transactions in which an engine left a
// savepoint open for COMMIT to release, so that it leaves at most one per
// transaction: on PostgreSQL each savepoint left open nests the next one,
// and a chain of nested subtransactions costs every other session that
// reads the rows they wrote a walk up the chain per row. A transaction is
// forgotten once the garbage collector reclaims it. The zero value is
// ready; it is safe for concurrent use.
type OpenSavepoints struct{ m sync.Map } // weak.Pointer[sql.Tx] → struct{}

// LeaveOpen reports whether the caller may leave its savepoint in tx open:
// true the first time for tx, which it then remembers, false after.
func (o *OpenSavepoints) LeaveOpen(tx *sql.Tx) bool {
	k := weak.Make(tx)
	if _, held := o.m.LoadOrStore(k, struct{}{}); held {
		return false
	}
	runtime.AddCleanup(tx, func(k weak.Pointer[sql.Tx]) { o.m.Delete(k) }, k)
	return true
}
