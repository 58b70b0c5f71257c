-- Batches claim many keys of one scope in a constant number of statements.
-- The keys travel as one JSON array of strings; sqlc's MySQL parser knows
-- neither JSON_TABLE nor recursive CTEs, so the array is walked by a
-- derived table of the numbers 0 to 999 (a batch holds at most 1000 keys).
-- These are the statements of a server without JSON_TABLE (MariaDB 10.5):
-- the driver's own, in mysqldriver/batchjson.go, walk the array once.

-- name: KeyInsertBatch :execrows
-- Claims the keys of a batch, each new row named by the batch's nonce as
-- KeyInsert's in-transaction claim is, in the order of the array (batches
-- sort their keys, so that two batches lock shared keys in one order). A
-- key that exists is left as it is: the no-op update takes its lock, as the
-- failed INSERT of a single claim does. KeyGetBatch then tells the rows
-- this statement inserted by their token.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
)
SELECT
    sqlc.arg(namespace),
    sqlc.arg(scope),
    CAST(JSON_UNQUOTE(JSON_EXTRACT(sqlc.arg(key_list), CONCAT('$[', seq.n, ']'))) AS BINARY),
    '',
    NULL,
    1,
    sqlc.arg(token),
    NULL,
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
FROM (
    SELECT d0.n + 10 * d1.n + 100 * d2.n AS n
    FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d0
    CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d1
    CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d2
) AS seq
WHERE seq.n < JSON_LENGTH(sqlc.arg(key_list))
ORDER BY seq.n
ON DUPLICATE KEY UPDATE idempotency_key = sqlonce_keys.idempotency_key;

-- name: KeyGetBatch :many
-- A locking read of a batch's keys after KeyInsertBatch: the rows whose
-- token is the batch's nonce are new, the others existed. available: an
-- expired key or a lapsed lease, which a single claim takes over. A join,
-- not IN (subquery): MariaDB 10.11 crashes optimizing that semi-join in a
-- prepared statement.
SELECT
    k.idempotency_key,
    k.fingerprint,
    k.response,
    k.state,
    k.token,
    CAST((k.expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
          OR (k.state = 2 AND k.locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED) AS available
FROM (
    SELECT d0.n + 10 * d1.n + 100 * d2.n AS n
    FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d0
    CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d1
    CROSS JOIN (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
          UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS d2
) AS seq
JOIN sqlonce_keys AS k
  ON k.namespace = sqlc.arg(namespace)
 AND k.scope = sqlc.arg(scope)
 AND k.idempotency_key = CAST(JSON_UNQUOTE(JSON_EXTRACT(sqlc.arg(key_list), CONCAT('$[', seq.n, ']'))) AS BINARY)
WHERE seq.n < JSON_LENGTH(sqlc.arg(key_list))
LOCK IN SHARE MODE;
