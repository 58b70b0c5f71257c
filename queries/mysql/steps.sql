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
-- (rewritten as recovery: one more attempt), if that recovery point is
-- still read: a step that committed since changed it, though not the token. The new token is token + 1;
-- the token's change makes the row count as changed.
UPDATE sqlonce_keys
SET token        = token + 1,
    response     = sqlc.arg(recovery),
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    expires_at   = GREATEST(expires_at, DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND token = sqlc.arg(token) AND state = 2 AND response = sqlc.arg(read_recovery)
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

-- name: KeyStepStart :execresult
-- Inserts the key of a new step operation, leased, with its first
-- recovery point. LAST_INSERT_ID(token) hands the token (the database
-- clock in microseconds, as a lease's) back in the result's LastInsertId.
-- A duplicate-key error: the key exists; the caller reads it again. Never
-- a takeover: a lapsed lease holds a recovery point to resume from.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg(namespace),
    sqlc.arg(scope),
    sqlc.arg(idempotency_key),
    sqlc.arg(fingerprint),
    sqlc.arg(recovery),
    2,
    LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
);

-- name: KeyStepRestart :execrows
-- Starts a step operation anew on an expired key read with token and read
-- in its response column. The new
-- token is token + 1, which makes the row count as changed.
UPDATE sqlonce_keys
SET fingerprint  = sqlc.arg(fingerprint),
    response     = sqlc.arg(recovery),
    state        = 2,
    token        = token + 1,
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    created_at   = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    expires_at   = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND token = sqlc.arg(token) AND response = sqlc.arg(read_recovery) AND expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND);

-- name: KeyStepRedrive :execrows
-- Turns the recorded end of a step operation given up, read with token and
-- read as its response, back into a stopped operation: recovery is its
-- recovery point, its lease lapsed at once for a retry or the resumer, and
-- the key lives at least ttl from now. The new token is token + 1; the
-- token's change makes the row count as changed.
UPDATE sqlonce_keys
SET state        = 2,
    token        = token + 1,
    response     = sqlc.arg(recovery),
    locked_until = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    expires_at   = GREATEST(expires_at, DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND token = sqlc.arg(token) AND state = 1 AND response = sqlc.arg(read_response)
  AND expires_at > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND);
