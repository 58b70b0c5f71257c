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

-- name: TokenConsume :one
-- Consumes a live token of the scope, and when it does not, reads the
-- token in the same statement: one row comes back either way. A concurrent
-- consumer of the same token waits for the row lock; READ COMMITTED then
-- re-checks consumed_at IS NULL against the committed row and changes
-- nothing, or, if the first rolled back, consumes it itself. The read runs
-- only when the UPDATE changed nothing: NOT EXISTS is a one-time filter
-- over the CTE, so a first run never executes the read's index scan (the
-- LIMIT keeps the subquery out of the join, where it would be a join
-- filter run after the scan). It reads by primary key, without a lock, on
-- the statement's snapshot: the row the UPDATE judged, except after such
-- a wait, when it still shows the token live and unconsumed, and the
-- library reads it again with TokenGet.
WITH consumed AS (
    UPDATE sqlonce_tokens AS u
    SET consumed_at = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE u.token_hash = sqlc.arg('token_hash')
      AND u.scope = sqlc.arg('scope')
      AND u.consumed_at IS NULL
      AND u.expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
    RETURNING 1
)
SELECT
    EXISTS (SELECT 1 FROM consumed)::boolean AS consumed_now,
    (t.token_hash IS NOT NULL)::boolean AS found,
    coalesce(t.scope, '')::text AS scope,
    (t.consumed_at IS NOT NULL)::boolean AS consumed,
    coalesce(t.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()), false)::boolean AS expired
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT r.token_hash, r.scope, r.consumed_at, r.expires_at
    FROM sqlonce_tokens AS r
    WHERE r.token_hash = sqlc.arg('token_hash')
      AND NOT EXISTS (SELECT 1 FROM consumed)
    LIMIT 1
) AS t ON true;

-- name: TokenGet :one
-- Tells why TokenConsume changed nothing when its own read cannot: a
-- statement of its own, so that under READ COMMITTED it sees the
-- consumption TokenConsume waited for.
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
