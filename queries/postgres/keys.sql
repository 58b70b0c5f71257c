-- Every time comparison uses the database clock. sqlc.narg('now') lets the
-- test suite pin "now" without sleeping; the library passes NULL.

-- name: KeyTakeover :one
-- Claims a key that has expired or whose lease has lapsed. Returns no row
-- when it is no longer available: a concurrent takeover won (READ
-- COMMITTED re-checks the condition after waiting for it).
UPDATE sqlonce_keys AS k SET
    fingerprint  = sqlc.arg('fingerprint'),
    response     = NULL,
    state        = sqlc.arg('state'),
    token        = greatest(k.token + 1, (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, now())) * 1000000)::bigint),
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.narg('lease_us')::bigint * interval '1 microsecond',
    created_at   = coalesce(sqlc.narg('now')::timestamptz, now()),
    expires_at   = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
WHERE k.namespace = sqlc.arg('namespace') AND k.scope = sqlc.arg('scope') AND k.idempotency_key = sqlc.arg('idempotency_key')
  AND (k.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
       OR (k.state = 2 AND k.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))
RETURNING k.token;

-- name: KeySetResponse :execrows
-- Records the first run's response in the claiming transaction.
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
    expires_at   = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyRelease :execrows
-- Gives a lease up so that the next claimer runs the work. The token moves
-- on, so that the releaser can neither release again nor complete.
UPDATE sqlonce_keys
SET token        = token + 1,
    locked_until = least(coalesce(sqlc.narg('now')::timestamptz, now()), expires_at)
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyExtend :execrows
-- Moves the deadline of a lease whose token is current, lapsed or not (a
-- lapsed lease nobody took over is still the holder's). expires_at follows,
-- so that locked_until <= expires_at holds and purge never deletes a held
-- lease.
UPDATE sqlonce_keys
SET locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond',
    expires_at   = greatest(expires_at, coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token') AND state = 2;

-- name: KeyPurge :execrows
-- Deletes up to max_rows expired keys, oldest first. SKIP LOCKED lets
-- several purgers run at once without waiting on each other or on claims
-- in progress. The batch is located by ctid so that the DELETE is a TID
-- scan: an IN (subquery) on the primary key is planned as a semi-join over
-- the whole table, once per batch. A live lease is never expired:
-- locked_until <= expires_at is a table constraint.
-- Namespace 3 holds PurgeEvery's lease (one row): it is never purged, so
-- that a purger's batch cannot delete the lease it has just extended when
-- the statements' clocks have moved past it (on MySQL and SQLite, where each
-- statement reads its own).
DELETE FROM sqlonce_keys
WHERE ctid = ANY(ARRAY(
    SELECT p.ctid
    FROM sqlonce_keys AS p
    WHERE p.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND p.namespace <> 3
    ORDER BY p.expires_at
    LIMIT sqlc.arg('max_rows')
    FOR UPDATE SKIP LOCKED
));

-- name: KeyInspect :one
-- Reads one key for Store.Inspect: its times in microseconds since the
-- epoch, the sizes of what it records, and whether its lease holds and
-- whether it has expired, as of the database's now.
SELECT
    state,
    token,
    octet_length(fingerprint)::bigint AS fingerprint_len,
    (response IS NOT NULL)::boolean AS has_response,
    coalesce(octet_length(response), 0)::bigint AS response_len,
    (extract(epoch FROM created_at) * 1000000)::bigint AS created_us,
    (extract(epoch FROM expires_at) * 1000000)::bigint AS expires_us,
    coalesce((extract(epoch FROM locked_until) * 1000000)::bigint, 0)::bigint AS locked_until_us,
    (state = 2 AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS leased,
    (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeyForget :execrows
-- Deletes one key for Store.Forget, unless a lease on it still holds and
-- force_held is false.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key')
  AND (sqlc.arg('force_held')::boolean OR state <> 2 OR locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()));
