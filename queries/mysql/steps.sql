-- The queries of dedupe's operations of several steps (namespace 4). While
-- such a key is leased, response holds its recovery point: the results of
-- the steps done so far.

-- name: KeyStepGet :one
-- Reads a step operation's key with its recovery point, and whether its
-- lease holds and whether it has expired, as of the database's now. A
-- locking read: it must see the latest version of the row.
SELECT
    fingerprint,
    response,
    state,
    token,
    CAST(COALESCE(state = 2 AND locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), 0) AS SIGNED) AS leased,
    CAST(expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND) AS SIGNED) AS expired
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
LOCK IN SHARE MODE;

-- name: KeyStepResume :execrows
-- Takes over a lapsed lease read with token, keeping its recovery point
-- (rewritten as recovery: one more attempt). The new token is token + 1;
-- the token's change makes the row count as changed.
UPDATE sqlonce_keys
SET token        = token + 1,
    response     = sqlc.arg(recovery),
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    expires_at   = GREATEST(expires_at, DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND token = sqlc.arg(token) AND state = 2
  AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND expires_at > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND);

-- name: KeyStepSave :execrows
-- Advances the recovery point of a lease held with token and extends the
-- lease; in a database step's transaction, it commits with the step. The
-- recovery point grows at every step, so the row counts as changed.
UPDATE sqlonce_keys
SET response     = sqlc.arg(recovery),
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    expires_at   = GREATEST(expires_at, DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND token = sqlc.arg(token) AND state = 2;

-- name: KeyStepStuck :many
-- Lists step operations whose lease lapsed (their holder stopped between
-- or inside steps) and that have not expired, longest stuck first.
SELECT scope, idempotency_key
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND state = 2
  AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND expires_at > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
ORDER BY locked_until
LIMIT ?;
