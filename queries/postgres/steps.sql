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
-- (rewritten as recovery: one more attempt), if that recovery point is
-- still read: a step that committed since changed it, though not the token. The new token is token + 1.
UPDATE sqlonce_keys
SET token        = token + 1,
    response     = sqlc.arg('recovery'),
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND token = sqlc.arg('token') AND state = 2 AND response = sqlc.arg('read_recovery')
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

-- name: KeyStepStart :one
-- Inserts the key of a new step operation, leased, with its first
-- recovery point, and returns its token (the database clock in
-- microseconds, as a lease's). No row: the key exists; the caller reads it
-- again. Never a takeover: a lapsed lease holds a recovery point to resume
-- from.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg('namespace'),
    sqlc.arg('scope'),
    sqlc.arg('idempotency_key'),
    sqlc.arg('fingerprint'),
    sqlc.arg('recovery'),
    2,
    (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, now())) * 1000000)::bigint,
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
)
ON CONFLICT (namespace, scope, idempotency_key) DO NOTHING
RETURNING token;

-- name: KeyStepRestart :execrows
-- Starts a step operation anew on an expired key read with token and read
-- in its response column. The new
-- token is token + 1.
UPDATE sqlonce_keys
SET fingerprint  = sqlc.arg('fingerprint'),
    response     = sqlc.arg('recovery'),
    state        = 2,
    token        = token + 1,
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    created_at   = coalesce(sqlc.narg('now')::timestamptz, now()),
    expires_at   = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND token = sqlc.arg('token') AND response = sqlc.arg('read_recovery') AND expires_at <= coalesce(sqlc.narg('now')::timestamptz, now());

-- name: KeyStepRedrive :execrows
-- Turns the recorded end of a step operation given up, read with token and
-- read as its response, back into a stopped operation: recovery is its
-- recovery point, its lease lapsed at once for a retry or the resumer, and
-- the key lives at least ttl from now. The new token is token + 1.
UPDATE sqlonce_keys
SET state        = 2,
    token        = token + 1,
    response     = sqlc.arg('recovery'),
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()),
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND token = sqlc.arg('token') AND state = 1 AND response = sqlc.arg('read_response')
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now());
