-- name: TokenInsert :exec
-- Issues a token: its hash, scope and expiry. Every time comparison uses
-- the database clock; sqlc.narg('now') lets the test suite pin "now"
-- without sleeping, the library passes NULL.
INSERT INTO sqlonce_tokens (token_hash, scope, created_at, expires_at)
VALUES (
    sqlc.arg('token_hash'),
    sqlc.arg('scope'),
    coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
);

-- name: TokenConsume :execrows
-- Consumes a live token of the scope: one row changed is this call's
-- consumption. A concurrent consumer of the same token waits for the row
-- lock; READ COMMITTED then re-checks consumed_at IS NULL against the
-- committed row and changes nothing, or, if the first rolled back,
-- consumes it itself.
UPDATE sqlonce_tokens
SET consumed_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE token_hash = sqlc.arg('token_hash')
  AND scope = sqlc.arg('scope')
  AND consumed_at IS NULL
  AND expires_at > coalesce(sqlc.narg('now')::timestamptz, now());

-- name: TokenGet :one
-- Tells why TokenConsume changed nothing. A statement of its own, so that
-- under READ COMMITTED it sees the consumption TokenConsume waited for.
SELECT
    scope,
    (consumed_at IS NOT NULL)::boolean AS consumed,
    (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM sqlonce_tokens
WHERE token_hash = sqlc.arg('token_hash');

-- name: TokenPurge :execrows
-- Deletes up to max_rows expired tokens, oldest first, skipping rows that
-- other transactions hold (see KeyPurge).
DELETE FROM sqlonce_tokens
WHERE ctid = ANY(ARRAY(
    SELECT p.ctid
    FROM sqlonce_tokens AS p
    WHERE p.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
    ORDER BY p.expires_at
    LIMIT sqlc.arg('max_rows')
    FOR UPDATE SKIP LOCKED
));
