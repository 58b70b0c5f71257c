package unique

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// Inserter runs inserts whose duplicate on a named unique constraint means
// "already done". It is safe for concurrent use.
type Inserter[TTx any] struct {
	engine   driver.Engine[TTx]
	caps     driver.Capabilities[TTx]
	observer sqlonce.Observer
}

// New returns an Inserter on the given driver. It returns an error
// matching sqlonce.ErrInvalidArgument for a nil driver or one not built
// by its package's New (a zero Driver), as every other New in sqlonce does.
func New[TTx any](d sqlonce.Driver[TTx]) (*Inserter[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: unique: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	e := d.Engine()
	return &Inserter[TTx]{engine: e, caps: e.Capabilities(), observer: obs.Of(d)}, nil
}

// Insert runs insert, the caller's INSERT of a row with a natural or
// client-generated key, in tx under a savepoint. It returns FirstRun when
// insert succeeds, and AlreadyDone when insert fails with a duplicate-key
// error on constraint: it then rolls back to the savepoint, so tx stays
// usable and nothing insert did remains. Every other error, a duplicate on
// another constraint included, is returned unchanged after that rollback.
// insert must fail on the duplicate (no INSERT IGNORE, no ON CONFLICT DO
// NOTHING: judge those with [Inserted]).
//
// constraint names the unique constraint or index as the database reports
// it ("<table>_pkey" on PostgreSQL, "PRIMARY" on MySQL and SQLite, a named
// unique index on SQLite). A row colliding on several unique constraints
// is reported on the first the server checks. A concurrent insert of the
// same key waits for the other transaction; a deadlock or serialization
// failure satisfies sqlonce.IsRetryable: roll back and retry. Names, the
// order of checks and savepoint costs per database:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#names-of-unique-constraints
func (u *Inserter[TTx]) Insert(ctx context.Context, tx TTx, constraint string, insert func(ctx context.Context) error) (res sqlonce.Result, err error) {
	op := obs.Start(u.observer, "unique", "Insert", constraint, "")
	defer func() { err = op.End(ctx, res, err) }()
	return u.insert(ctx, tx, constraint, false, insert, &op)
}

// InsertOne is Insert for an insert that runs exactly one statement and
// returns that statement's error, as a sqlc-generated call does
// (_, err := q.CreateOrder(ctx, arg); return err). A failed statement
// rolls back alone on MySQL/MariaDB and SQLite and leaves the transaction
// usable, so InsertOne runs insert there without a savepoint: the round
// trips of the bare transaction, first run and duplicate alike.
// PostgreSQL aborts the transaction at any failed statement, so there it
// runs as Insert does.
//
// Everything else is as for Insert. If insert runs more than one
// statement, or fails after its statement succeeded, on MySQL/MariaDB
// and SQLite what it wrote before the failure stays in tx: use Insert.
func (u *Inserter[TTx]) InsertOne(ctx context.Context, tx TTx, constraint string, insert func(ctx context.Context) error) (res sqlonce.Result, err error) {
	op := obs.Start(u.observer, "unique", "InsertOne", constraint, "")
	defer func() { err = op.End(ctx, res, err) }()
	return u.insert(ctx, tx, constraint, true, insert, &op)
}

func (u *Inserter[TTx]) insert(ctx context.Context, tx TTx, constraint string, single bool, insert func(ctx context.Context) error, op *obs.Op) (sqlonce.Result, error) {
	if err := keys.CheckTx(tx); err != nil {
		return sqlonce.Result{}, err
	}
	if constraint == "" {
		return sqlonce.Result{}, fmt.Errorf("%w: empty constraint name", sqlonce.ErrInvalidArgument)
	}
	if insert == nil {
		return sqlonce.Result{}, fmt.Errorf("%w: nil insert", sqlonce.ErrInvalidArgument)
	}
	var insertErr error
	err := u.engine.Guard(ctx, tx, single, func(ctx context.Context) error {
		op.WorkStart()
		insertErr = insert(ctx)
		op.WorkEnd()
		return insertErr
	})
	if err != nil {
		// Guard returns insert's error itself only when the rollback to the
		// savepoint, if it took one, worked; a failed rollback is joined to
		// it and tx is not usable, so that is never AlreadyDone. Nor is a duplicate that
		// insert returned together with an error that ended or doomed tx
		// (a deadlock, a lost connection): the row it collided with may be
		// gone with a rollback, and the caller must run tx again.
		if !unchanged(err, insertErr) || driver.Classify(err).Has(notDone) {
			return sqlonce.Result{}, err
		}
		dup, lookupErr := u.isDuplicate(ctx, tx, err, constraint)
		if lookupErr != nil {
			// The duplicate cannot be judged (SQLite looks the index up):
			// return why, never the raw duplicate, which would pass for a
			// duplicate on another constraint.
			return sqlonce.Result{}, fmt.Errorf("sqlonce/unique: look up constraint %q after a duplicate-key error (%v): %w", constraint, err, lookupErr)
		}
		if dup {
			return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
		}
		return sqlonce.Result{}, err
	}
	return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
}

// notDone are the classes of error that forbid an AlreadyDone whatever
// else the error holds.
const notDone = driver.Retryable | driver.TxRolledBack | driver.TxDone | driver.ConnLost

func (u *Inserter[TTx]) isDuplicate(ctx context.Context, tx TTx, err error, constraint string) (bool, error) {
	if d := u.caps.DuplicateInTx; d != nil {
		dup, lookupErr := d.IsDuplicateInTx(ctx, tx, err, constraint)
		if cErr := ctx.Err(); lookupErr != nil && cErr != nil && !errors.Is(lookupErr, cErr) {
			// The driver may report an interrupted query rather than the
			// context's error: the caller must see the context's.
			lookupErr = fmt.Errorf("%w (%v)", cErr, lookupErr)
		}
		return dup, lookupErr
	}
	return u.engine.IsDuplicate(err, constraint), nil
}

// InsertOrGet is Insert for callers that need the row either way: on
// FirstRun it returns what insert returned, on AlreadyDone what get reads
// (the row the earlier call inserted), so a repeat gets the same answer.
//
// get must see the other transaction's committed row: on MySQL/MariaDB
// under REPEATABLE READ read it with LOCK IN SHARE MODE (FOR SHARE on MySQL
// 8). If get finds no row (sql.ErrNoRows, pgx.ErrNoRows), the snapshot
// predates the row, as under PostgreSQL REPEATABLE READ: InsertOrGet returns
// sqlonce.ErrStaleRead, which is retryable.
func InsertOrGet[T, TTx any](ctx context.Context, u *Inserter[TTx], tx TTx, constraint string, insert, get func(ctx context.Context) (T, error)) (_ T, res sqlonce.Result, err error) {
	op := obs.Start(u.observer, "unique", "InsertOrGet", constraint, "")
	defer func() { err = op.End(ctx, res, err) }()
	return insertOrGet(ctx, u, tx, constraint, false, insert, get, &op)
}

// InsertOneOrGet is InsertOrGet for an insert that runs exactly one
// statement, without a savepoint where InsertOne needs none: a sqlc
// :one call such as q.CreateOrder(ctx, arg) as insert, and a read of the
// row by its key as get.
func InsertOneOrGet[T, TTx any](ctx context.Context, u *Inserter[TTx], tx TTx, constraint string, insert, get func(ctx context.Context) (T, error)) (_ T, res sqlonce.Result, err error) {
	op := obs.Start(u.observer, "unique", "InsertOneOrGet", constraint, "")
	defer func() { err = op.End(ctx, res, err) }()
	return insertOrGet(ctx, u, tx, constraint, true, insert, get, &op)
}

func insertOrGet[T, TTx any](ctx context.Context, u *Inserter[TTx], tx TTx, constraint string, single bool, insert, get func(ctx context.Context) (T, error), op *obs.Op) (T, sqlonce.Result, error) {
	var zero, v T
	if insert == nil || get == nil {
		return zero, sqlonce.Result{}, fmt.Errorf("%w: nil insert or get", sqlonce.ErrInvalidArgument)
	}
	res, err := u.insert(ctx, tx, constraint, single, func(ctx context.Context) error {
		var err error
		v, err = insert(ctx)
		return err
	}, op)
	if err != nil {
		return zero, res, err
	}
	if res.FirstRun() {
		return v, res, nil
	}
	v, err = get(ctx)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches sql.ErrNoRows
			return zero, sqlonce.Result{}, fmt.Errorf("%w: duplicate on %s but the existing row is not visible: %w", sqlonce.ErrStaleRead, constraint, err)
		}
		return zero, sqlonce.Result{}, fmt.Errorf("sqlonce/unique: read existing row: %w", err)
	}
	return v, res, nil
}

// unchanged reports whether Guard returned insert's error itself. Not with
// a bare ==: comparing two interfaces that hold the same uncomparable type
// (a slice of field errors, say) panics.
func unchanged(err, insertErr error) bool {
	t := reflect.TypeOf(err)
	return t != nil && t == reflect.TypeOf(insertErr) && t.Comparable() && err == insertErr
}
