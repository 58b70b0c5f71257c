-- The claim, for each library: pgx runs it as a batch, so that it can
-- travel in one round trip with the statements around it; database/sql
-- runs it alone. The two files hold the same statement.

-- name: KeyClaim :one
-- Inserts a new key (inserted = true), or reads the existing one in the
-- same round trip (inserted = false). DO NOTHING, unlike DO UPDATE, leaves
-- an existing row unlocked, so a duplicate that only reads stays a
-- read-only transaction: no WAL flush at its commit. A concurrent inserter
-- of the same key still makes it wait until that transaction ends; a row
-- committed during that wait is not in this statement's snapshot, and no
-- row comes back: the caller then reads with KeyGet.
WITH ins AS (
    INSERT INTO sqlonce_keys (
        namespace, scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at
    ) VALUES (
        sqlc.arg('namespace'),
        sqlc.arg('scope'),
        sqlc.arg('idempotency_key'),
        sqlc.arg('fingerprint'),
        sqlc.arg('state'),
        -- A new key's token is the real time (clock_timestamp), not now(),
        -- which is when the transaction began: a transaction older than the
        -- last claim of a key since purged would otherwise give the new
        -- claim a smaller token than the purged one.
        (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())) * 1000000)::bigint,
        coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.narg('lease_us')::bigint * interval '1 microsecond',
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
    )
    ON CONFLICT (namespace, scope, idempotency_key) DO NOTHING
    RETURNING token
)
SELECT true AS inserted, ins.token, '\x'::bytea AS fingerprint, NULL::bytea AS response,
       false AS locked, false AS available
FROM ins
UNION ALL
SELECT false AS inserted, k.token, k.fingerprint, k.response,
       (k.state = 2 AND k.locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS locked,
       (k.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
        OR (k.state = 2 AND k.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))::boolean AS available
FROM sqlonce_keys AS k
WHERE k.namespace = sqlc.arg('namespace') AND k.scope = sqlc.arg('scope') AND k.idempotency_key = sqlc.arg('idempotency_key')
  AND NOT EXISTS (SELECT 1 FROM ins);
