-- name: KeyRunRecord :execrows
-- Records a key done, with its fingerprint and response, at the end of
-- Store.Run's transaction through database/sql. ON CONFLICT DO NOTHING,
-- unlike pgx's KeyRunInsert: a key that another transaction recorded
-- (waited for, if that one was still open) inserts nothing and leaves the
-- transaction usable, so that Run can read the key in it (0 rows).
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg('namespace'),
    sqlc.arg('scope'),
    sqlc.arg('idempotency_key'),
    sqlc.arg('fingerprint'),
    sqlc.arg('response'),
    1,
    (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())) * 1000000)::bigint,
    NULL,
    coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
)
ON CONFLICT (namespace, scope, idempotency_key) DO NOTHING;

-- name: KeyRunReplace :execrows
-- Takes over, for Store.Run, the expired key or the lapsed lease read with
-- token: records it done with the run's fingerprint and response under a
-- greater token, if it is still available. A row that changed since (taken
-- over, completed late by its lease holder) stays as it is, and no row
-- changes: READ COMMITTED checks the condition again on the row as the
-- transaction that changed it left it.
UPDATE sqlonce_keys AS k
SET fingerprint  = sqlc.arg('fingerprint'),
    response     = sqlc.arg('response'),
    state        = 1,
    token        = greatest(k.token + 1, (extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())) * 1000000)::bigint),
    locked_until = NULL,
    created_at   = coalesce(sqlc.narg('now')::timestamptz, now()),
    expires_at   = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
WHERE k.namespace = sqlc.arg('namespace') AND k.scope = sqlc.arg('scope') AND k.idempotency_key = sqlc.arg('idempotency_key') AND k.token = sqlc.arg('token')
  AND (k.expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
       OR (k.state = 2 AND k.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())));
