-- name: TokenInsert :exec
-- Issues a token: its hash, scope and expiry. Every time is an integer
-- count of microseconds since the Unix epoch from the database clock;
-- sqlc.narg('now') lets the test suite pin "now" without sleeping, the
-- library passes NULL.
INSERT INTO sqlonce_tokens (token_hash, scope, created_at, expires_at)
VALUES (
    sqlc.arg('token_hash'),
    sqlc.arg('scope'),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('ttl_us') AS INTEGER)
);

-- name: TokenConsume :execrows
-- Consumes a live token of the scope: one row changed is this call's
-- consumption. The writer holds the database's write lock, so no other
-- consumer runs in between.
UPDATE sqlonce_tokens
SET consumed_at = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
WHERE token_hash = sqlc.arg('token_hash')
  AND scope = sqlc.arg('scope')
  AND consumed_at IS NULL
  AND expires_at > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000);

-- name: TokenGet :one
-- Tells why TokenConsume changed nothing.
SELECT
    scope,
    CAST(consumed_at IS NOT NULL AS INTEGER) AS consumed,
    CAST(expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS expired
FROM sqlonce_tokens
WHERE token_hash = sqlc.arg('token_hash');

-- name: TokenPurge :execrows
-- Deletes up to max_rows expired tokens, oldest first.
DELETE FROM sqlonce_tokens
WHERE token_hash IN (
    SELECT p.token_hash
    FROM sqlonce_tokens AS p
    WHERE p.expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
    ORDER BY p.expires_at
    LIMIT sqlc.arg('max_rows')
);
