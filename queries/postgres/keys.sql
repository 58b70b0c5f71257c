-- Every time comparison uses the database clock. sqlc.narg('now') lets the
-- test suite pin "now" without sleeping; the library passes NULL.

-- name: KeyClaim :one
-- Inserts the key, or takes over a key that has expired or whose lease has
-- lapsed. Returns no row when a live key is already there. A concurrent
-- claimer of the same key waits on the unique index until the holder's
-- transaction ends.
INSERT INTO sqlonce_keys AS k (
    scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg('scope'),
    sqlc.arg('idempotency_key'),
    sqlc.arg('fingerprint'),
    sqlc.arg('state'),
    (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, now())) * 1000000)::bigint,
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.narg('lease_us')::bigint * interval '1 microsecond',
    coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
)
ON CONFLICT (scope, idempotency_key) DO UPDATE SET
    fingerprint  = excluded.fingerprint,
    response     = NULL,
    state        = excluded.state,
    token        = greatest(k.token + 1, excluded.token),
    locked_until = excluded.locked_until,
    created_at   = excluded.created_at,
    expires_at   = excluded.expires_at
WHERE k.expires_at <= excluded.created_at
   OR (k.state = 2 AND k.locked_until <= excluded.created_at)
RETURNING k.token;

-- name: KeyGet :one
-- Reads a key that a claim found held by someone else.
SELECT
    fingerprint,
    response,
    state,
    token,
    (state = 2 AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS locked
FROM sqlonce_keys
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeySetResponse :execrows
-- Records the first run's response in the claiming transaction.
UPDATE sqlonce_keys
SET response = sqlc.arg('response')
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token');

-- name: KeyDelete :execrows
-- Undoes a claim whose work failed, so that a commit by mistake cannot leave
-- a key marked done with nothing done.
DELETE FROM sqlonce_keys
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token');

-- name: KeyComplete :execrows
-- Completes a lease: only the holder of the current token may.
UPDATE sqlonce_keys
SET state        = 1,
    response     = sqlc.arg('response'),
    locked_until = NULL,
    expires_at   = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyRelease :execrows
-- Gives a lease up so that the next claimer runs the work.
UPDATE sqlonce_keys
SET locked_until = least(coalesce(sqlc.narg('now')::timestamptz, now()), expires_at)
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyExtend :execrows
-- Moves a held lease's deadline.
UPDATE sqlonce_keys
SET locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond')
WHERE scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2
  AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now());

-- name: KeyPurge :execrows
-- Deletes up to max_rows expired keys, oldest first. SKIP LOCKED lets
-- several purgers run at once without waiting on each other or on claims
-- in progress. The batch is located by ctid so that the DELETE is a TID
-- scan: an IN (subquery) on the primary key is planned as a semi-join over
-- the whole table, once per batch. A live lease is never expired:
-- locked_until <= expires_at is a table constraint.
DELETE FROM sqlonce_keys
WHERE ctid = ANY(ARRAY(
    SELECT p.ctid
    FROM sqlonce_keys AS p
    WHERE p.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
    ORDER BY p.expires_at
    LIMIT sqlc.arg('max_rows')
    FOR UPDATE SKIP LOCKED
));
