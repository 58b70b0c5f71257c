-- Every time is an integer count of microseconds since the Unix epoch, and
-- every comparison uses the database clock:
-- CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 (SQLite's clock
-- has millisecond resolution). sqlc.narg('now') lets the test suite pin
-- "now" without sleeping; the library passes NULL.

-- name: KeyClaim :one
-- Inserts a new key, or takes over an expired key or a lapsed lease, and
-- returns the claim's token. No row: the key exists and is live; the
-- caller reads it with KeyGet in the same transaction. The INSERT took the
-- database's write lock, so nothing changes the row in between.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg('namespace'),
    sqlc.arg('scope'),
    sqlc.arg('idempotency_key'),
    sqlc.arg('fingerprint'),
    sqlc.arg('state'),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.narg('lease_us') AS INTEGER),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('ttl_us') AS INTEGER)
)
ON CONFLICT (namespace, scope, idempotency_key) DO UPDATE SET
    fingerprint  = excluded.fingerprint,
    response     = NULL,
    state        = excluded.state,
    token        = max(sqlonce_keys.token + 1, excluded.token),
    locked_until = excluded.locked_until,
    created_at   = excluded.created_at,
    expires_at   = excluded.expires_at
WHERE sqlonce_keys.expires_at <= excluded.created_at
   OR (sqlonce_keys.state = 2 AND sqlonce_keys.locked_until <= excluded.created_at)
RETURNING token;

-- name: KeyGet :one
-- Reads the live key a KeyClaim could not take. has_response tells an
-- empty response from none: the driver reads a zero-length BLOB as nil.
-- SQLite reads its clock once per statement, not per transaction: the
-- key's state is judged here, with this statement's "now", never with
-- KeyClaim's. available: the key expired or its lease lapsed between the
-- two statements; the driver claims it again.
SELECT
    fingerprint,
    response,
    CAST(response IS NOT NULL AS INTEGER) AS has_response,
    CAST(expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
         OR (state = 2 AND locked_until <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)) AS INTEGER) AS available,
    CAST(state = 2 AND locked_until > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS locked
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeySetResponse :execrows
-- Records the first run's response in the claiming transaction. SQLite
-- counts the rows an UPDATE matched, changed or not.
UPDATE sqlonce_keys
SET response = sqlc.arg('response')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token');

-- name: KeyDelete :execrows
-- Undoes a claim whose work failed, so that a commit by mistake cannot leave
-- a key marked done with nothing done.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token');

-- name: KeyComplete :execrows
-- Completes a lease: only the holder of the current token may.
UPDATE sqlonce_keys
SET state        = 1,
    response     = sqlc.arg('response'),
    locked_until = NULL,
    expires_at   = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('ttl_us') AS INTEGER)
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyRelease :execrows
-- Gives a lease up so that the next claimer runs the work. The token moves
-- on, so that the releaser can neither release again nor complete.
UPDATE sqlonce_keys
SET token        = token + 1,
    locked_until = min(coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), expires_at)
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyExtend :execrows
-- Moves the deadline of a lease whose token is current, lapsed or not (a
-- lapsed lease nobody took over is still the holder's). expires_at follows,
-- so that locked_until <= expires_at holds and purge never deletes a held
-- lease.
UPDATE sqlonce_keys
SET locked_until = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('lease_us') AS INTEGER),
    expires_at   = max(expires_at, coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('lease_us') AS INTEGER))
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyPurge :execrows
-- Deletes up to max_rows expired keys, oldest first, walking the expiry
-- index. SQLite has no DELETE ... LIMIT in its default build. A live lease
-- is never expired: locked_until <= expires_at is a table constraint.
-- Namespace 3 holds PurgeEvery's lease (one row): it is never purged, so
-- that a purger's batch cannot delete the lease it has just extended when
-- the statements' clocks (read per statement) have moved past it.
DELETE FROM sqlonce_keys
WHERE (namespace, scope, idempotency_key) IN (
    SELECT p.namespace, p.scope, p.idempotency_key
    FROM sqlonce_keys AS p
    WHERE p.expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
      AND p.namespace <> 3
    ORDER BY p.expires_at
    LIMIT sqlc.arg('max_rows')
);

-- name: KeyInspect :one
-- Reads one key for Store.Inspect: its times (microseconds since the
-- epoch, as stored), the sizes of what it records, and whether its lease
-- holds and whether it has expired, as of the database's now.
SELECT
    state,
    token,
    CAST(length(fingerprint) AS INTEGER) AS fingerprint_len,
    CAST(response IS NOT NULL AS INTEGER) AS has_response,
    CAST(coalesce(length(response), 0) AS INTEGER) AS response_len,
    created_at,
    expires_at,
    CAST(coalesce(locked_until, 0) AS INTEGER) AS locked_until_us,
    CAST(coalesce(state = 2 AND locked_until > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), 0) AS INTEGER) AS leased,
    CAST(expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS expired
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeyForget :execrows
-- Deletes one key for Store.Forget, unless a lease on it still holds and
-- force_held is 0.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND (CAST(sqlc.arg('force_held') AS INTEGER) <> 0 OR state <> 2 OR locked_until <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000));
