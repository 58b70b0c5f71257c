-- name: KeyClaimBatch :many
-- pgx's KeyClaimBatch (queries/postgres/pgx/batch.sql) for database/sql:
-- the keys travel as one JSON array of strings, a text parameter that
-- both pgx's stdlib and lib/pq bind as they bind any string, where pgx's
-- form takes a text[] (which lib/pq binds only through pq.Array). Claims
-- the keys of a batch in one statement: the new keys are inserted
-- (inserted = true), the existing ones read (inserted = false), in the
-- array's order. A key committed while this statement waited comes back
-- in no row, and an expired key or a lapsed lease as available: the
-- caller claims those alone.
-- The existing keys are read with one primary-key lookup each (the
-- LATERAL subquery, kept a subquery by its LIMIT), whatever the planner
-- believes of the scope's size: as a join or "= ANY" the read filtered all
-- of the scope's rows when the table's statistics were stale (a young
-- table), a cost growing with every key of the scope.
WITH input AS (
    SELECT u.k, u.n
    FROM jsonb_array_elements_text(CAST(sqlc.arg('key_list') AS text)::jsonb) WITH ORDINALITY AS u (k, n)
), ins AS (
    INSERT INTO sqlonce_keys (
        namespace, scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at
    )
    SELECT
        sqlc.arg('namespace'),
        sqlc.arg('scope'),
        input.k,
        '\x'::bytea,
        1,
        (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())) * 1000000)::bigint,
        NULL,
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
    FROM input
    ORDER BY input.n
    ON CONFLICT (namespace, scope, idempotency_key) DO NOTHING
    RETURNING idempotency_key, token
)
SELECT ins.idempotency_key::text AS idempotency_key, true AS inserted, ins.token, '\x'::bytea AS fingerprint,
       NULL::bytea AS response, false AS locked, false AS available
FROM ins
UNION ALL
SELECT k.idempotency_key::text, false, k.token, k.fingerprint, k.response,
       (k.state = 2 AND k.locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean,
       (k.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
        OR (k.state = 2 AND k.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))::boolean
FROM input
CROSS JOIN LATERAL (
    SELECT s.idempotency_key, s.token, s.fingerprint, s.response, s.state, s.locked_until, s.expires_at
    FROM sqlonce_keys AS s
    WHERE s.namespace = sqlc.arg('namespace') AND s.scope = sqlc.arg('scope') AND s.idempotency_key = input.k
    LIMIT 1
) AS k
WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.idempotency_key = k.idempotency_key);
