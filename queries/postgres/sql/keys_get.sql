-- name: KeyGet :one
-- Reads a key that KeyClaim found but could not see (it was committed
-- while the insert waited). The same statement as pgx's KeyGet batch.
-- available: expired, or a lapsed lease, so KeyTakeover may claim it.
SELECT
    fingerprint,
    response,
    state,
    token,
    (state = 2 AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS locked,
    (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
     OR (state = 2 AND locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))::boolean AS available
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');
