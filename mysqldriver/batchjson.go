package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
)

// A batch's claim walks its JSON array of keys with JSON_TABLE (MariaDB
// 10.6, MySQL 8.0.4): the server parses the array once. The generated
// KeyInsertBatch and KeyGetBatch walk it with a table of the numbers 0 to
// 999 and JSON_EXTRACT, which parses the whole array again for every key:
// on MariaDB 10.11 a claim of 100 keys took about 3 ms for the INSERT and
// 2 ms for the read that way, against 0.3 and 0.25 ms with JSON_TABLE
// (measured on one connection, profiling on). On MariaDB the INSERT also
// returns every key's row, the new ones and the existing ones its no-op
// update locked (INSERT ... RETURNING, which MySQL lacks), so no read
// follows it. sqlc's MySQL parser knows neither JSON_TABLE nor RETURNING,
// so these statements are written here, with the generated ones' columns,
// arguments and locks. A server refuses a shape it lacks with a parse
// error, once per handle, and the driver goes on with the next: RETURNING
// (MariaDB 10.6 and later), JSON_TABLE alone (MySQL 8), the generated
// statements (MariaDB 10.5).
const (
	sqlKeyInsertBatchReturning = `INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
)
SELECT
    ?,
    ?,
    CAST(j.k AS BINARY),
    '',
    NULL,
    1,
    ?,
    NULL,
    COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL ? MICROSECOND)
FROM JSON_TABLE(?, '$[*]' COLUMNS (i FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) AS j
ORDER BY j.i
ON DUPLICATE KEY UPDATE idempotency_key = sqlonce_keys.idempotency_key
RETURNING
    idempotency_key,
    fingerprint,
    response,
    state,
    token,
    CAST((expires_at <= COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
          OR (state = 2 AND locked_until <= COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED)`

	sqlKeyInsertBatchJSON = `INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
)
SELECT
    ?,
    ?,
    CAST(j.k AS BINARY),
    '',
    NULL,
    1,
    ?,
    NULL,
    COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL ? MICROSECOND)
FROM JSON_TABLE(?, '$[*]' COLUMNS (i FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) AS j
ORDER BY j.i
ON DUPLICATE KEY UPDATE idempotency_key = IF(LAST_INSERT_ID(VALUES(token)) IS NULL, NULL, sqlonce_keys.idempotency_key)`

	sqlKeyGetBatchJSON = `SELECT
    k.idempotency_key,
    k.fingerprint,
    k.response,
    k.state,
    k.token,
    CAST((k.expires_at <= COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
          OR (k.state = 2 AND k.locked_until <= COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED) AS available
FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) CHARACTER SET utf8mb4 PATH '$')) AS j
JOIN sqlonce_keys AS k
  ON k.namespace = ?
 AND k.scope = ?
 AND k.idempotency_key = CAST(j.k AS BINARY)
LOCK IN SHARE MODE`
)

// errParse is ER_PARSE_ERROR: what a server answers to a statement shape
// it lacks.
const errParse = 1064

// The batch claim's shapes, from the fastest.
const (
	shapeReturning int32 = iota // INSERT ... RETURNING over JSON_TABLE: MariaDB 10.6
	shapeJSONTable              // JSON_TABLE, then a read when a key existed: MySQL 8
	shapeNumbers                // the generated statements: MariaDB 10.5
	// shapePerKey: each key claimed alone, as on vtgate (ClaimBatch), for
	// a session whose server refused a shape with vtgate's parse error.
	shapePerKey
)

// batchShape is the first shape the server has not refused; shared by the
// drivers on one handle, as the statements are.
type batchShape struct{ first atomic.Int32 }

// vtgateParse begins vtgate's refusal of a statement its own parser
// cannot read (1105): MariaDB's INSERT ... RETURNING, which a session
// pinned to one shard (keyspace:shard in the DSN) sends on, since vtgate
// passes the driver's probe on to the tablet, which answers with its
// MariaDB version. The batch's other shapes do not hold through vtgate
// either (its JSON_TABLE argument arrives re-encoded: 4035 "Broken JSON
// string" for keys of any byte): such a session claims each key alone, as
// the driver does on vtgate.
const vtgateParse = "syntax error at position "

// refusedBy reports whether err is the server's refusal of shape, and then
// remembers it.
func (c *batchShape) refusedBy(err error, shape int32) bool {
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) {
		return false
	}
	if myErr.Number == errUnknown && strings.HasPrefix(myErr.Message, vtgateParse) {
		c.first.Store(shapePerKey)
		return true
	}
	if myErr.Number != errParse {
		return false
	}
	for {
		cur := c.first.Load()
		if cur > shape || c.first.CompareAndSwap(cur, shape+1) {
			return true
		}
	}
}

// insertBatchReturning runs the batch's INSERT in the RETURNING shape: a
// row for every key, new (the nonce its token) or existing. ok is false
// when the server lacks the shape.
func (e engine) insertBatchReturning(ctx context.Context, tx *sql.Tx, p mysqldb.KeyInsertBatchParams) (items []mysqldb.KeyGetBatchRow, ok bool, err error) {
	rows, err := e.on(tx).QueryContext(ctx, sqlKeyInsertBatchReturning,
		p.Namespace, p.Scope, p.Token, p.Now, p.Now, p.TtlUs, p.KeyList, p.Now, p.Now)
	if err != nil {
		if e.batch.refusedBy(err, shapeReturning) {
			return nil, false, nil
		}
		return nil, false, err
	}
	items, err = scanBatchRows(rows)
	return items, err == nil, err
}

// insertBatch runs the batch's INSERT: with JSON_TABLE unless the server
// refused it once, then the generated statement. allNew reports that it
// inserted every one of n keys: no key existed, so the batch won them all
// and no read has anything to tell. A key that exists leaves its row as it
// is, and its no-op update sets LAST_INSERT_ID to the batch's nonce (the
// row's would-be token, VALUES(token): with the nonce as a constant
// argument the server folds the call away and reports nothing), which
// comes back with the statement's answer as the single claim's token does.
// The affected rows must be n too; they alone cannot tell, as an unchanged
// row counts 1 for a client with clientFoundRows=true.
func (e engine) insertBatch(ctx context.Context, tx *sql.Tx, p mysqldb.KeyInsertBatchParams, n int) (allNew bool, err error) {
	if e.batch.first.Load() <= shapeJSONTable {
		res, err := e.on(tx).ExecContext(ctx, sqlKeyInsertBatchJSON,
			p.Namespace, p.Scope, p.Token, p.Now, p.Now, p.TtlUs, p.KeyList)
		if err == nil {
			id, idErr := res.LastInsertId()
			rows, rowsErr := res.RowsAffected()
			return idErr == nil && rowsErr == nil && id != p.Token && rows == int64(n), nil
		}
		if !e.batch.refusedBy(err, shapeJSONTable) {
			return false, err
		}
	}
	_, err = e.q.KeyInsertBatch(ctx, e.on(tx), p)
	return false, err
}

// getBatch runs the batch's locking read, as insertBatch.
func (e engine) getBatch(ctx context.Context, tx *sql.Tx, p mysqldb.KeyGetBatchParams) ([]mysqldb.KeyGetBatchRow, error) {
	if e.batch.first.Load() > shapeJSONTable {
		return e.q.KeyGetBatch(ctx, e.on(tx), p)
	}
	rows, err := e.on(tx).QueryContext(ctx, sqlKeyGetBatchJSON, p.Now, p.Now, p.KeyList, p.Namespace, p.Scope)
	if err != nil {
		if e.batch.refusedBy(err, shapeJSONTable) {
			return e.q.KeyGetBatch(ctx, e.on(tx), p)
		}
		return nil, err
	}
	return scanBatchRows(rows)
}

// scanBatchRows reads and closes rows of KeyGetBatch's columns.
func scanBatchRows(rows *sql.Rows) ([]mysqldb.KeyGetBatchRow, error) {
	defer rows.Close()
	var items []mysqldb.KeyGetBatchRow
	for rows.Next() {
		var i mysqldb.KeyGetBatchRow
		if err := rows.Scan(&i.IdempotencyKey, &i.Fingerprint, &i.Response, &i.State, &i.Token, &i.Available); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	return items, rows.Err()
}
