-- name: KeyGet :batchone
-- Reads a key that KeyClaim found but could not see, or that Store.Run
-- looks up under KeyLock. available: expired, or a lapsed lease, so
-- KeyTakeover may claim it. A batch, so that Store.Run sends it in the
-- round trip that begins its transaction.
SELECT
    fingerprint,
    response,
    state,
    token,
    (state = 2 AND locked_until > coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS locked,
    (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
     OR (state = 2 AND locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))::boolean AS available
FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key');

-- name: KeyRunDelete :batchexec
-- Deletes the expired key, or the lapsed lease, that Store.Run takes over,
-- in the round trip of its commit: the row it read (token), if it is still
-- available. A lease completed late by its holder is not: it stays, and
-- fails the KeyRunInsert that follows.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token')
  AND (expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
       OR (state = 2 AND locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())));

-- name: KeyTryLock :batchone
-- Store.Run's first statement after BEGIN: takes the key's advisory lock
-- if no other transaction holds it (see KeyLock). The KeyGet queued behind
-- it in the same round trip reads the key with a snapshot taken after the
-- lock, so a run that held the lock and committed before this one took it
-- is seen, and replayed without running fn. Not locked: KeyLock and
-- KeyGet, which wait and read afresh.
SELECT pg_try_advisory_xact_lock(
    1936289646,
    hashtext('sqlonce_keys'::regclass::oid::text || ':' || sqlc.arg('namespace')::smallint::text || ':' || octet_length(sqlc.arg('scope')::text)::text || ':' || sqlc.arg('scope')::text || sqlc.arg('idempotency_key')::text)
)::boolean AS locked;

-- name: KeyLock :batchexec
-- Takes the advisory lock that Store.Run holds on a key from its lookup to
-- its commit, waiting while another run holds it. The lock only makes
-- concurrent runs of one key wait for each other instead of all doing the
-- work: KeyRunInsert, a plain INSERT, is what refuses a second record. It
-- lives in the two-int4 key space, class 1936289646 ('sqon'), apart from
-- the bigint advisory locks applications take; two keys whose 32-bit hashes
-- collide only wait for each other. Advisory locks belong to the database,
-- not to a schema: the hash takes the keys table's oid (the table the
-- session's search_path resolves), so that services or tenants keeping
-- sqlonce's tables in schemas of their own never wait on each other's keys.
SELECT pg_advisory_xact_lock(
    1936289646,
    hashtext('sqlonce_keys'::regclass::oid::text || ':' || sqlc.arg('namespace')::smallint::text || ':' || octet_length(sqlc.arg('scope')::text)::text || ':' || sqlc.arg('scope')::text || sqlc.arg('idempotency_key')::text)
);

-- name: KeyRunInsert :batchexec
-- Records a key done, with its fingerprint and response, at the end of
-- Store.Run's transaction, in the round trip of its COMMIT. A plain INSERT,
-- not ON CONFLICT: on a key that another transaction recorded meanwhile it
-- fails, and the COMMIT queued behind it never runs. min_token keeps the
-- token of a taken-over key growing.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg('namespace'),
    sqlc.arg('scope'),
    sqlc.arg('idempotency_key'),
    sqlc.arg('fingerprint'),
    sqlc.arg('response'),
    1,
    greatest((extract(epoch FROM coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())) * 1000000)::bigint, sqlc.arg('min_token')::bigint),
    NULL,
    coalesce(sqlc.narg('now')::timestamptz, now()),
    coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('ttl_us')::bigint * interval '1 microsecond'
);

-- name: LockTimeoutPush :batchexec
-- Bounds the lock waits of the statements that follow, for the rest of
-- the (sub)transaction, and keeps the value it replaces in the
-- transaction-local custom setting named save_in (sqlonce.lock_timeout),
-- so that LockTimeoutPop, sent in the same round trip, can restore it
-- without the client reading it first.
SELECT set_config(sqlc.arg('save_in')::text, current_setting('lock_timeout'), true),
       set_config('lock_timeout', sqlc.arg('value')::text, true);

-- name: LockTimeoutPop :batchexec
-- Restores the lock_timeout that LockTimeoutPush saved in saved_in.
SELECT set_config('lock_timeout', current_setting(sqlc.arg('saved_in')::text), true);

-- name: KeyRunRespond :batchexec
-- Records the response of a key that Store.Run claimed in its own
-- transaction (token), in the round trip of its COMMIT.
UPDATE sqlonce_keys
SET response = sqlc.arg('response')
WHERE namespace = sqlc.arg('namespace') AND scope = sqlc.arg('scope') AND idempotency_key = sqlc.arg('idempotency_key') AND token = sqlc.arg('token');
