-- The queries of dedupe's operations of several steps (namespace 4). While
-- such a key is leased, response holds its recovery point: the results of
-- the steps done so far.

-- name: KeyStepGet :one
-- Reads a step operation's key with its recovery point, and whether its
-- lease holds and whether it has expired, as of the database's now.
SELECT
    fingerprint,
    response,
    state,
    token,
    (state = 2 AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS leased,
    (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeyStepResume :execrows
-- Takes over a lapsed lease read with token, keeping its recovery point
-- (rewritten as recovery: one more attempt). The new token is token + 1.
UPDATE sqlonce_keys
SET token        = token + 1,
    response     = sqlc.arg('recovery'),
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND token = sqlc.arg('token') AND state = 2
  AND locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now());

-- name: KeyStepSave :execrows
-- Advances the recovery point of a lease held with token and extends the
-- lease; in a database step's transaction, it commits with the step.
UPDATE sqlonce_keys
SET response     = sqlc.arg('recovery'),
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND token = sqlc.arg('token') AND state = 2;

-- name: KeyStepStuck :many
-- Lists step operations whose lease lapsed (their holder stopped between
-- or inside steps) and that have not expired, longest stuck first.
SELECT scope, idempotency_key
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND state = 2
  AND locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY locked_until
LIMIT sqlc.arg('max_rows');
