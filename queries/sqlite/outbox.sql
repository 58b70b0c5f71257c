-- The transactional outbox (package outbox), on sqlonce_outbox. Every
-- time is an integer count of microseconds since the Unix epoch from the
-- database clock; sqlc.narg('now') lets the test suite pin "now", the
-- library passes NULL. One writer holds the database's write lock at a
-- time (BEGIN IMMEDIATE), so no claim runs beside another.

-- name: OutboxInsert :execrows
-- Adds a message, due at once; no row changed: its id is taken.
INSERT INTO sqlonce_outbox (
    id, topic, ordering_key, payload, headers, fingerprint, available_at, created_at
) VALUES (
    sqlc.arg('id'), sqlc.arg('topic'), sqlc.arg('ordering_key'), sqlc.arg('payload'),
    sqlc.arg('headers'), sqlc.arg('fingerprint'),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000),
    coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
)
ON CONFLICT (id) DO NOTHING;

-- name: OutboxFingerprint :one
-- The fingerprint of the message OutboxInsert found in its way.
SELECT fingerprint FROM sqlonce_outbox WHERE id = sqlc.arg('id');

-- name: OutboxClaim :many
-- Leases up to max_rows due messages in seq order: pending, available,
-- not leased, and the first unsent message of their ordering key. The
-- lease token moves on at each claim, which fences the relay whose lease
-- lapsed.
UPDATE sqlonce_outbox
SET lease_token = lease_token + 1,
    locked_until = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) + CAST(sqlc.arg('lease_us') AS INTEGER)
WHERE seq IN (
    SELECT o.seq
    FROM sqlonce_outbox AS o
    WHERE o.state = 0
      AND o.available_at <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
      AND (o.locked_until IS NULL OR o.locked_until <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000))
      AND (o.ordering_key = '' OR NOT EXISTS (
          SELECT 1 FROM sqlonce_outbox AS e
          WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.state <> 1))
    ORDER BY o.seq
    LIMIT sqlc.arg('max_rows')
)
RETURNING seq, lease_token, id, topic, ordering_key, payload, headers, fingerprint, attempts, created_at;

-- name: OutboxSent :execrows
-- Marks a message sent if its lease token is still the one given.
UPDATE sqlonce_outbox
SET state = 1, sent_at = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000), locked_until = NULL, last_error = ''
WHERE seq = sqlc.arg('seq') AND lease_token = sqlc.arg('lease_token') AND state = 0 AND locked_until IS NOT NULL;

-- name: OutboxFailed :execrows
-- Records a failed publish of a message still leased with the token given.
UPDATE sqlonce_outbox
SET state = CAST(sqlc.arg('new_state') AS INTEGER),
    attempts = attempts + 1,
    last_error = sqlc.arg('last_error'),
    locked_until = NULL,
    available_at = coalesce(CAST(sqlc.narg('retry_at') AS INTEGER), coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000))
WHERE seq = sqlc.arg('seq') AND lease_token = sqlc.arg('lease_token') AND state = 0 AND locked_until IS NOT NULL;

-- name: OutboxPurge :execrows
-- Deletes up to max_rows messages sent before sent_before, oldest first.
DELETE FROM sqlonce_outbox
WHERE seq IN (
    SELECT p.seq
    FROM sqlonce_outbox AS p
    WHERE p.state = 1 AND p.sent_at < CAST(sqlc.arg('sent_before') AS INTEGER)
    ORDER BY p.sent_at
    LIMIT sqlc.arg('max_rows')
);

-- name: OutboxGet :one
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    CAST(state = 0 AND locked_until IS NOT NULL AND locked_until > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE id = sqlc.arg('id');

-- name: OutboxList :many
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    CAST(state = 0 AND locked_until IS NOT NULL AND locked_until > coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000) AS INTEGER) AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE state = sqlc.arg('state') AND seq > sqlc.arg('after_seq')
ORDER BY seq
LIMIT sqlc.arg('max_rows');

-- name: OutboxRedrive :execrows
-- Makes a parked message pending again, due at once.
UPDATE sqlonce_outbox
SET state = 0, attempts = 0, locked_until = NULL, available_at = coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
WHERE id = sqlc.arg('id') AND state = 2;

-- name: OutboxForget :execrows
-- Deletes a message, unless it is leased and force is 0.
DELETE FROM sqlonce_outbox
WHERE id = sqlc.arg('id')
  AND (CAST(sqlc.arg('force') AS INTEGER) = 1 OR state <> 0 OR locked_until IS NULL OR locked_until <= coalesce(CAST(sqlc.narg('now') AS INTEGER), CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000));

-- name: OutboxStats :one
SELECT
    CAST(coalesce(sum(state = 0), 0) AS INTEGER) AS pending,
    CAST(coalesce(sum(state = 2), 0) AS INTEGER) AS parked,
    CAST(coalesce(sum(state = 1), 0) AS INTEGER) AS sent,
    CAST(coalesce(min(CASE WHEN state = 0 THEN created_at END), 0) AS INTEGER) AS oldest_pending
FROM sqlonce_outbox;
