-- Batches claim many keys of one scope in two statements at most. The keys
-- travel as one JSON array of strings, walked by json_each: one host
-- parameter whatever the batch's size, far from SQLite's limit on host
-- parameters (32766 since 3.32, 999 before).

-- name: KeyClaimBatch :many
-- Claims the keys of a batch, as KeyClaim claims one key done with the
-- transaction (no fingerprint, no lease): a new key is inserted, an
-- expired key or a lapsed lease taken over; both come back with their
-- token. A live key is left as it is and comes back in no row: the caller
-- reads it with KeyGetBatch in the same transaction. The INSERT took the
-- database's write lock, so nothing else changes the rows in between.
-- (WHERE true: SQLite's parser needs it before ON CONFLICT in an INSERT
-- ... SELECT.)
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at
)
SELECT
    sqlc.arg('namespace'),
    sqlc.arg('scope'),
    CAST(j.value AS TEXT),
    x'',
    1,
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    NULL,
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('ttl_us') AS INTEGER)
FROM json_each(CAST(sqlc.arg('key_list') AS TEXT)) AS j
WHERE true
ON CONFLICT (namespace, scope, idempotency_key) DO UPDATE SET
    fingerprint  = excluded.fingerprint,
    response     = NULL,
    state        = excluded.state,
    token        = max(sqlonce_keys.token + 1, excluded.token),
    locked_until = NULL,
    created_at   = excluded.created_at,
    expires_at   = excluded.expires_at
WHERE sqlonce_keys.expires_at <= excluded.created_at
   OR (sqlonce_keys.state = 2 AND sqlonce_keys.locked_until <= excluded.created_at)
RETURNING idempotency_key, token;

-- name: KeyGetBatch :many
-- Reads the live keys of a batch that KeyClaimBatch could not take, as
-- KeyGet reads one, judged with this statement's "now". available: the
-- key expired or its lease lapsed since KeyClaimBatch; the caller claims
-- it alone.
SELECT
    idempotency_key,
    fingerprint,
    response,
    CAST(response IS NOT NULL AS INTEGER) AS has_response,
    CAST(expires_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
         OR (state = 2 AND locked_until <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)) AS INTEGER) AS available,
    CAST(state = 2 AND locked_until > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS locked
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope')
  AND idempotency_key IN (SELECT CAST(j.value AS TEXT) FROM json_each(CAST(sqlc.arg('key_list') AS TEXT)) AS j);
