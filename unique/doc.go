// Package unique makes inserts with a natural or client-generated key
// idempotent: a duplicate key on the named unique constraint means "already
// done".
//
// Use it where the row has a key of its own: an order code, a user and an
// item in a flash sale, a distributed id chosen by the client.
//
//	ins, err := unique.New(pgxdriver.New(nil))
//	res, err := ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
//		_, err := q.InsertOrder(ctx, code)
//		return err
//	})
//
// Only a duplicate on the named constraint counts. A duplicate on any other
// constraint, and every other error, is returned as it is: those are real
// errors. The errors are recognised by their typed fields
// (pgconn.PgError.Code and ConstraintName on PostgreSQL, MySQLError.Number
// on MySQL), never by the message where a field exists.
//
// The insert runs under a savepoint. PostgreSQL aborts the whole
// transaction on a unique violation; rolling back to the savepoint keeps it
// usable, and on every database it undoes whatever else the insert function
// wrote before the duplicate.
//
// [InsertOrGet] also reads the existing row back, so a repeat gets the same
// answer the first call got.
//
// Do not reach for INSERT IGNORE on MySQL for this: it also swallows NOT
// NULL, range, truncation and foreign-key errors.
package unique
