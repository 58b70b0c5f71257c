-- The transactional outbox (package outbox), on sqlonce_outbox. Every
-- time comparison uses the database clock; sqlc.narg('now') lets the test
-- suite pin "now", the library passes NULL.

-- name: OutboxInsert :one
-- Adds a message, due at once, and notifies the channel (delivered at
-- COMMIT, and only if the transaction commits) in the same statement.
-- false: its id is taken, nothing changed and no one is notified. The
-- notification's CTE reads the insert's, so it runs once per row inserted.
WITH ins AS (
    INSERT INTO sqlonce_outbox (
        id, topic, ordering_key, payload, headers, fingerprint, available_at, created_at
    ) VALUES (
        sqlc.arg('id'), sqlc.arg('topic'), sqlc.arg('ordering_key'), sqlc.arg('payload'),
        sqlc.arg('headers'), sqlc.arg('fingerprint'),
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now())
    )
    ON CONFLICT (id) DO NOTHING
    RETURNING seq
), notified AS (
    SELECT pg_notify(sqlc.arg('channel')::text, '') FROM ins
)
SELECT EXISTS (SELECT 1 FROM notified)::boolean AS inserted;

-- name: OutboxInsertNoNotify :one
-- OutboxInsert without the notification (outbox.WithoutNotify): a
-- notifying transaction takes a lock of the whole cluster at COMMIT,
-- which commits the notifying transactions one at a time; relays find
-- these messages by polling. false: its id is taken, nothing changed.
WITH ins AS (
    INSERT INTO sqlonce_outbox (
        id, topic, ordering_key, payload, headers, fingerprint, available_at, created_at
    ) VALUES (
        sqlc.arg('id'), sqlc.arg('topic'), sqlc.arg('ordering_key'), sqlc.arg('payload'),
        sqlc.arg('headers'), sqlc.arg('fingerprint'),
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now())
    )
    ON CONFLICT (id) DO NOTHING
    RETURNING seq
)
SELECT EXISTS (SELECT 1 FROM ins)::boolean AS inserted;

-- name: OutboxFingerprint :one
-- The fingerprint of the message OutboxInsert found in its way: a
-- statement of its own, so that under READ COMMITTED it sees the row of
-- the transaction the insert waited for.
SELECT fingerprint FROM sqlonce_outbox WHERE id = sqlc.arg('id');

-- name: OutboxClaim :many
-- Leases up to max_rows due messages in seq order: pending, available,
-- not leased, and the first unsent message of their ordering key (the
-- NOT EXISTS probes sqlonce_outbox_unsent_key_idx). Rows other claims
-- hold locked are skipped; the NOT EXISTS reads without a lock, so a
-- key's earlier message that another claim holds still holds back its
-- later ones. The lease token moves on at each claim, which fences the
-- relay whose lease lapsed.
WITH due AS (
    SELECT o.seq
    FROM sqlonce_outbox AS o
    WHERE o.state = 0
      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (o.locked_until IS NULL OR o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()))
      AND (o.ordering_key = '' OR NOT EXISTS (
          SELECT 1 FROM sqlonce_outbox AS e
          WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.state <> 1))
    ORDER BY o.seq
    LIMIT sqlc.arg('max_rows')
    FOR UPDATE SKIP LOCKED
)
UPDATE sqlonce_outbox AS u
SET lease_token = u.lease_token + 1,
    locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + sqlc.arg('lease_us')::bigint * interval '1 microsecond'
FROM due
WHERE u.seq = due.seq
RETURNING u.seq, u.lease_token, u.id, u.topic, u.ordering_key, u.payload, u.headers, u.fingerprint, u.attempts, u.created_at;

-- name: OutboxFailed :execrows
-- Records a failed publish of a message still leased with the token given.
UPDATE sqlonce_outbox
SET state = sqlc.arg('new_state')::smallint,
    attempts = attempts + 1,
    last_error = sqlc.arg('last_error')::text,
    locked_until = NULL,
    available_at = coalesce(sqlc.narg('retry_at')::timestamptz, coalesce(sqlc.narg('now')::timestamptz, now()))
WHERE seq = sqlc.arg('seq') AND lease_token = sqlc.arg('lease_token') AND state = 0 AND locked_until IS NOT NULL;

-- name: OutboxPurge :execrows
-- Deletes up to max_rows messages sent before sent_before, oldest first,
-- skipping rows that other transactions hold.
DELETE FROM sqlonce_outbox
WHERE seq = ANY(ARRAY(
    SELECT p.seq
    FROM sqlonce_outbox AS p
    WHERE p.state = 1 AND p.sent_at < sqlc.arg('sent_before')::timestamptz
    ORDER BY p.sent_at
    LIMIT sqlc.arg('max_rows')
    FOR UPDATE SKIP LOCKED
));

-- name: OutboxGet :one
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    (state = 0 AND coalesce(locked_until > coalesce(sqlc.narg('now')::timestamptz, now()), false))::boolean AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE id = sqlc.arg('id');

-- name: OutboxList :many
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    (state = 0 AND coalesce(locked_until > coalesce(sqlc.narg('now')::timestamptz, now()), false))::boolean AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE state = sqlc.arg('state') AND seq > sqlc.arg('after_seq')
ORDER BY seq
LIMIT sqlc.arg('max_rows');

-- name: OutboxRedrive :execrows
-- Makes a parked message pending again, due at once.
UPDATE sqlonce_outbox
SET state = 0, attempts = 0, locked_until = NULL, available_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE id = sqlc.arg('id') AND state = 2;

-- name: OutboxForget :execrows
-- Deletes a message, unless it is leased and force is false.
DELETE FROM sqlonce_outbox
WHERE id = sqlc.arg('id')
  AND (sqlc.arg('force')::boolean OR state <> 0 OR locked_until IS NULL OR locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()));

-- name: OutboxStats :one
SELECT
    count(*) FILTER (WHERE state = 0) AS pending,
    count(*) FILTER (WHERE state = 2) AS parked,
    count(*) FILTER (WHERE state = 1) AS sent,
    coalesce(min(created_at) FILTER (WHERE state = 0), 'epoch'::timestamptz)::timestamptz AS oldest_pending
FROM sqlonce_outbox;
