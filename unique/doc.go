// Package unique makes inserts with a natural or client-generated key
// idempotent: a repeat that finds the key taken means "already done".
//
// Use it where the row has a key of its own: an order code, a user and an
// item in a flash sale, a distributed id chosen by the client.
//
// There are three forms, for three shapes of insert:
//
//   - [Inserter.InsertOne] (and [InsertOneOrGet]) for an insert that is one
//     statement failing on a duplicate, as a sqlc-generated call is. A
//     duplicate-key error on the named constraint means "already done".
//     On MySQL/MariaDB and SQLite it takes no savepoint.
//   - [Inserted] for an INSERT ... ON CONFLICT (key) DO NOTHING (PostgreSQL,
//     SQLite), judged by the rows it affected, as optimistic.Update is.
//     Nothing fails, so nothing needs a savepoint. MySQL has no such
//     statement.
//   - [Inserter.Insert] (and [InsertOrGet]) for an insert of several
//     statements: it runs under a savepoint, so that a duplicate leaves
//     nothing of it behind.
//
// On PostgreSQL a failed statement aborts the whole transaction, so
// InsertOne and Insert both take a savepoint there; prefer Inserted.
// Savepoint costs and constraint names per database: docs/drivers.md.
//
//	drv, err := mysqldriver.New(db)
//	...
//	ins, err := unique.New(drv)
//	res, err := ins.InsertOne(ctx, tx, "orders_code_key", func(ctx context.Context) error {
//		_, err := q.CreateOrder(ctx, arg) // sqlc: INSERT INTO orders ...
//		return err
//	})
//
//	rows, err := q.CreateOrderIfAbsent(ctx, arg) // sqlc :execrows: ... ON CONFLICT (code) DO NOTHING
//	if err != nil {
//		return err
//	}
//	res, err := unique.Inserted(ctx, rows)
//
// Only a duplicate on the named constraint (for Inserted: the conflict
// target) counts. A duplicate on any other constraint, and every other
// error, is returned as it is: those are real errors. The errors are
// recognised by their typed fields (pgconn.PgError.Code and
// ConstraintName on PostgreSQL, MySQLError.Number on MySQL), never by the
// message where a field exists.
//
// [InsertOrGet] and [InsertOneOrGet] also read the existing row back, so a
// repeat gets the same answer the first call got; with Inserted, read it
// when the result is AlreadyDone.
//
// Do not reach for INSERT IGNORE or ON DUPLICATE KEY UPDATE id = id on
// MySQL for this: both take a duplicate on any unique key for a repeat,
// and INSERT IGNORE also swallows NOT NULL, range, truncation and
// foreign-key errors. Nor for a bare ON CONFLICT DO NOTHING, without a
// conflict target, which also takes a duplicate on any unique constraint
// for a repeat.
package unique
