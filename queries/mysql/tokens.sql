-- name: TokenInsert :exec
-- Issues a token: its hash, scope and expiry. Every time comparison uses
-- the database clock (UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6))
-- MICROSECOND); sqlc.narg(now) lets the test suite pin "now" without
-- sleeping, the library passes NULL.
INSERT INTO sqlonce_tokens (token_hash, scope, created_at, expires_at)
VALUES (
    sqlc.arg(token_hash),
    sqlc.arg(scope),
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
);

-- name: TokenConsume :execrows
-- Consumes a live token of the scope: one row changed is this call's
-- consumption (NULL to a time always counts as a change). An UPDATE reads
-- the latest committed row, whatever the isolation level: a concurrent
-- consumer waits for the row lock, then finds consumed_at set and changes
-- nothing, or, if the first rolled back, consumes it itself.
UPDATE sqlonce_tokens
SET consumed_at = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
WHERE token_hash = sqlc.arg(token_hash)
  AND scope = sqlc.arg(scope)
  AND consumed_at IS NULL
  AND expires_at > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND);

-- name: TokenConsumeRead :execresult
-- TokenConsume that also tells a repeat why it changed nothing, in its own
-- answer: when the token of the scope is not consumable, the second branch
-- of the OR sets LAST_INSERT_ID to 2 (expired) + 4 (consumed), which the
-- statement's OK packet carries back (the result's LastInsertId), and
-- fails. The same row, the same WHERE on it, judged the same way: the
-- same locks as TokenConsume's, and no write on a repeat. A consumable
-- token never reaches LAST_INSERT_ID (OR stops at its first true branch),
-- so a first run leaves the session's LAST_INSERT_ID() alone. No row of
-- the scope (an unknown token, one of another scope) leaves it unset: 0,
-- and TokenGet tells which.
UPDATE sqlonce_tokens
SET consumed_at = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
WHERE token_hash = sqlc.arg(token_hash)
  AND scope = sqlc.arg(scope)
  AND ((consumed_at IS NULL
        AND expires_at > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))
       OR LAST_INSERT_ID(2 * (expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))
                         + 4 * (consumed_at IS NOT NULL)) = 0);

-- name: TokenGet :one
-- Tells why TokenConsume changed nothing, or TokenConsumeRead when it
-- found no row of the scope. A locking read: under
-- REPEATABLE READ a plain SELECT would read the transaction's snapshot,
-- from before the consumption TokenConsume waited for.
SELECT
    scope,
    CAST(consumed_at IS NOT NULL AS SIGNED) AS consumed,
    CAST(expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND) AS SIGNED) AS expired
FROM sqlonce_tokens
WHERE token_hash = sqlc.arg(token_hash)
LOCK IN SHARE MODE;

-- name: TokenGetInScope :one
-- TokenGet of the scope's token alone, through vtgate: the scope, the
-- tokens' vindex column, routes it to the scope's shard, the shard whose
-- row TokenConsume locked. TokenGet by the hash alone reads every shard,
-- and a repeat holding the token's row lock would wait for a transaction
-- on another shard, whose transactions may wait for locks held here. No
-- row: the token is unknown or another scope's, which TokenGet tells.
SELECT
    CAST(consumed_at IS NOT NULL AS SIGNED) AS consumed,
    CAST(expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND) AS SIGNED) AS expired
FROM sqlonce_tokens
WHERE token_hash = sqlc.arg(token_hash)
  AND scope = sqlc.arg(scope)
LOCK IN SHARE MODE;

-- name: TokenPurge :execrows
-- Deletes up to the given number of expired tokens in expiry order.
DELETE FROM sqlonce_tokens
WHERE expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
ORDER BY expires_at
LIMIT ?;
