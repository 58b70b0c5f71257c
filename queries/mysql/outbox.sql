-- The transactional outbox (package outbox), on sqlonce_outbox. Every
-- time comparison uses the database clock (UTC_TIMESTAMP() + INTERVAL
-- MICROSECOND(NOW(6)) MICROSECOND); sqlc.narg(now) lets the test suite pin
-- "now", the library passes NULL.

-- name: OutboxInsert :execresult
-- Adds a message, due at once. A taken id leaves its row as it is (the
-- no-op update; INSERT IGNORE would turn other errors into warnings too),
-- and the answer's insert id is then 0: a new row's is its seq.
INSERT INTO sqlonce_outbox (
    id, topic, ordering_key, payload, headers, fingerprint, available_at, created_at, last_error
) VALUES (
    sqlc.arg(id), sqlc.arg(topic), sqlc.arg(ordering_key), sqlc.arg(payload),
    sqlc.arg(headers), sqlc.arg(fingerprint),
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    ''
)
ON DUPLICATE KEY UPDATE id = id;

-- name: OutboxFingerprint :one
-- The fingerprint of the message OutboxInsert found in its way. A locking
-- read: under REPEATABLE READ a plain one reads the transaction's
-- snapshot, from before the row the insert waited for.
SELECT fingerprint FROM sqlonce_outbox WHERE id = sqlc.arg(id) LOCK IN SHARE MODE;

-- name: OutboxClaimLock :many
-- The claim's first statement: locks up to the given number of due
-- messages in seq order (pending, available, not leased, the first unsent
-- message of their ordering key), skipping rows other transactions hold.
-- The NOT EXISTS reads without a lock, so a key's earlier message that
-- another claim holds still holds back its later ones.
SELECT o.seq, o.lease_token, o.id, o.topic, o.ordering_key, o.payload, o.headers, o.fingerprint, o.attempts, o.created_at
FROM sqlonce_outbox AS o
WHERE o.state = 0
  AND o.available_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND (o.locked_until IS NULL OR o.locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))
  AND (o.ordering_key = '' OR NOT EXISTS (
      SELECT 1 FROM sqlonce_outbox AS e
      WHERE e.ordering_key = o.ordering_key AND e.state IN (0, 2) AND e.seq < o.seq))
ORDER BY o.seq
LIMIT ?
FOR UPDATE SKIP LOCKED;

-- name: OutboxClaimLease :execrows
-- The claim's second statement: leases the rows OutboxClaimLock locked,
-- seq between first_seq and last_seq and listed in seqs (comma-separated).
-- The lease token moves on at each claim, which fences the relay whose
-- lease lapsed.
UPDATE sqlonce_outbox
SET lease_token = lease_token + 1,
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND)
WHERE seq BETWEEN sqlc.arg(first_seq) AND sqlc.arg(last_seq)
  AND FIND_IN_SET(seq, sqlc.arg(seqs)) > 0;

-- name: OutboxSent :execrows
-- Marks as sent each message still leased with its token given: the
-- leases come as seq:token pairs, comma-separated, their seqs between
-- first_seq and last_seq for the primary key's range.
UPDATE sqlonce_outbox
SET state = 1, sent_at = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), locked_until = NULL, last_error = ''
WHERE seq BETWEEN sqlc.arg(first_seq) AND sqlc.arg(last_seq)
  AND FIND_IN_SET(CONCAT(seq, ':', lease_token), sqlc.arg(leases)) > 0
  AND state = 0 AND locked_until IS NOT NULL;

-- name: OutboxFailed :execrows
-- Records a failed publish of a message still leased with the token given.
UPDATE sqlonce_outbox
SET state = sqlc.arg(new_state),
    attempts = attempts + 1,
    last_error = sqlc.arg(last_error),
    locked_until = NULL,
    available_at = COALESCE(CAST(sqlc.narg(retry_at) AS DATETIME(6)), COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))
WHERE seq = sqlc.arg(seq) AND lease_token = sqlc.arg(lease_token) AND state = 0 AND locked_until IS NOT NULL;

-- name: OutboxPurge :execrows
-- Deletes up to the given number of messages sent before sent_before,
-- oldest first.
DELETE FROM sqlonce_outbox
WHERE state = 1 AND sent_at < sqlc.arg(sent_before)
ORDER BY sent_at
LIMIT ?;

-- name: OutboxGet :one
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    CAST(state = 0 AND COALESCE(locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), 0) AS SIGNED) AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE id = sqlc.arg(id);

-- name: OutboxList :many
SELECT seq, id, topic, ordering_key, payload, headers, fingerprint, state, attempts, last_error,
    CAST(state = 0 AND COALESCE(locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), 0) AS SIGNED) AS leased,
    created_at, available_at, sent_at, locked_until
FROM sqlonce_outbox
WHERE state = sqlc.arg(state) AND seq > sqlc.arg(after_seq)
ORDER BY seq
LIMIT ?;

-- name: OutboxRedrive :execrows
-- Makes a parked message pending again, due at once.
UPDATE sqlonce_outbox
SET state = 0, attempts = 0, locked_until = NULL, available_at = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
WHERE id = sqlc.arg(id) AND state = 2;

-- name: OutboxForget :execrows
-- Deletes a message, unless it is leased and force is 0.
DELETE FROM sqlonce_outbox
WHERE id = sqlc.arg(id)
  AND (sqlc.arg(forced) = 1 OR state <> 0 OR locked_until IS NULL OR locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND));

-- name: OutboxStats :one
SELECT
    CAST(COALESCE(SUM(state = 0), 0) AS SIGNED) AS pending,
    CAST(COALESCE(SUM(state = 2), 0) AS SIGNED) AS parked,
    CAST(COALESCE(SUM(state = 1), 0) AS SIGNED) AS sent,
    CAST(COALESCE(MIN(CASE WHEN state = 0 THEN created_at END), '1970-01-01') AS DATETIME(6)) AS oldest_pending
FROM sqlonce_outbox;
