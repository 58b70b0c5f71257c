-- Every time comparison uses the database clock (UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND).
-- sqlc.narg('now') lets the test suite pin "now" without sleeping; the
-- library passes NULL. MySQL has no RETURNING and no ON CONFLICT ... WHERE,
-- so a claim is an INSERT, then on a duplicate a locking read and, for an
-- expired key or a lapsed lease, a takeover UPDATE.

-- name: KeyInsert :execresult
-- token: the caller's nonce for an in-transaction claim (MySQL has no
-- RETURNING, and Unclaim/SetResponse must name the row they created), or
-- NULL for a lease, whose token starts at the database clock in
-- microseconds so that it grows across purges. LAST_INSERT_ID(token) hands
-- the token back in the statement's own answer (the result's
-- LastInsertId), with no read after it. response: NULL for a claim;
-- Store.Run records the key with its response in one statement.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg(namespace),
    sqlc.arg(scope),
    sqlc.arg(idempotency_key),
    sqlc.arg(fingerprint),
    sqlc.narg(response),
    sqlc.arg(state),
    LAST_INSERT_ID(COALESCE(CAST(sqlc.narg(token) AS SIGNED),
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)))),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.narg(lease_us) MICROSECOND),
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
);

-- name: KeyInsertNonce :exec
-- KeyInsert for an in-transaction claim, whose token is the caller's
-- nonce, without LAST_INSERT_ID: the MySQL driver sends it through
-- Vitess's vtgate. A statement that calls LAST_INSERT_ID(x) makes vttablet
-- reset the session's LAST_INSERT_ID first, with a statement that
-- reconnects and runs again on a lost connection: a transaction whose
-- MySQL connection was killed then goes on, without an error, on a new
-- connection in autocommit, its earlier statements lost and its later
-- ones each committing alone.
INSERT INTO sqlonce_keys (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
) VALUES (
    sqlc.arg(namespace),
    sqlc.arg(scope),
    sqlc.arg(idempotency_key),
    sqlc.arg(fingerprint),
    NULL,
    sqlc.arg(state),
    sqlc.arg(token),
    NULL,
    COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
);

-- name: KeyGetLocked :one
-- A locking read: under REPEATABLE READ a plain SELECT would read the
-- transaction's old snapshot, not the row that made the INSERT fail.
SELECT
    fingerprint,
    response,
    state,
    token,
    CAST((expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
          OR (state = 2 AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED) AS available,
    CAST((state = 2 AND locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)) AS SIGNED) AS locked,
    CAST(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED) AS next_token
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
LOCK IN SHARE MODE;

-- name: KeyLookup :one
-- Store.Run's read of a key before its transaction: in autocommit, a
-- consistent read of the committed row, without locks.
SELECT
    fingerprint,
    response,
    token,
    CAST((expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
          OR (state = 2 AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND))) AS SIGNED) AS available,
    CAST((state = 2 AND locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)) AS SIGNED) AS locked
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: KeyTakeover :execrows
-- Takes over an expired key or a lapsed lease read by KeyGetLocked; the
-- token check makes a concurrent takeover of the same row lose, and the
-- condition that it is still available a completion of the lease since
-- (a claim in autocommit holds no lock between the read and this).
UPDATE sqlonce_keys
SET fingerprint  = sqlc.arg(fingerprint),
    response     = NULL,
    state        = sqlc.arg(state),
    token        = sqlc.arg(next_token),
    locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.narg(lease_us) MICROSECOND),
    created_at   = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    expires_at   = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token)
  AND (expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
       OR (state = 2 AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)));

-- name: KeySetResponse :execrows
UPDATE sqlonce_keys
SET response = sqlc.arg(response)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token);

-- name: KeyAppendResponse :execrows
-- Appends a piece of a response too large for one statement. The length
-- check makes a piece change nothing unless every earlier piece is there.
UPDATE sqlonce_keys
SET response = CONCAT(response, sqlc.arg(piece))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token)
  AND LENGTH(response) = CAST(sqlc.arg(prefix_len) AS SIGNED);

-- name: KeyResponseLength :one
-- CONCAT gives NULL, with only a warning, when its result would be longer
-- than the server's max_allowed_packet: the last piece is checked here.
SELECT CAST(COALESCE(LENGTH(response), -1) AS SIGNED) AS response_len
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: KeyDelete :execrows
-- The token check matters after a deadlock: MySQL has rolled the whole
-- transaction back, the next statement runs in autocommit, and without it
-- this DELETE would remove the marker a concurrent transaction committed.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token);

-- name: KeyRunReplace :execrows
-- Takes over, for Store.Run, the expired key or the lapsed lease read with
-- token: records it done with the run's fingerprint and response (its
-- first piece) under the run's nonce, if it is still available. A row
-- that changed since (taken over, completed late by its lease holder)
-- stays as it is, and no row changes.
UPDATE sqlonce_keys
SET fingerprint  = sqlc.arg(fingerprint),
    response     = sqlc.arg(response),
    state        = 1,
    token        = sqlc.arg(new_token),
    locked_until = NULL,
    created_at   = COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND),
    expires_at   = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token)
  AND (expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
       OR (state = 2 AND locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)));

-- name: KeyComplete :execrows
UPDATE sqlonce_keys
SET state        = 1,
    response     = sqlc.arg(response),
    locked_until = NULL,
    expires_at   = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(ttl_us) MICROSECOND)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token) AND state = 2;

-- name: KeyRelease :execrows
-- The token moves on, so that the releaser can neither release again nor
-- complete, and the row always counts as changed.
UPDATE sqlonce_keys
SET token        = token + 1,
    locked_until = LEAST(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), expires_at)
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token) AND state = 2;

-- name: KeyExtend :execrows
-- Moves the deadline of a lease whose token is current, lapsed or not.
-- expires_at follows, so that locked_until <= expires_at holds and purge
-- never deletes a held lease.
UPDATE sqlonce_keys
SET locked_until = DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND),
    expires_at   = GREATEST(expires_at, DATE_ADD(COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), INTERVAL sqlc.arg(lease_us) MICROSECOND))
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token) AND state = 2;

-- name: KeyLeaseHeld :one
-- Tells a KeyExtend that changed nothing (the new deadline equals the old
-- one; MySQL counts changed rows, not matched ones) from one that found the
-- lease lost. A locking read: it must see the latest version of the row.
SELECT CAST(COUNT(*) AS SIGNED) AS held
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token) AND state = 2
LOCK IN SHARE MODE;

-- name: KeyClaimHeld :one
-- Whether the transaction still holds a claim it made (its nonce token),
-- after the work: through Vitess's vtgate a statement that reached a second
-- shard rolls the whole transaction back, and a plain read then runs in
-- autocommit and finds no row of that token.
SELECT CAST(COUNT(*) AS SIGNED) AS held
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key) AND token = sqlc.arg(token);

-- name: KeyPurge :execrows
-- Deletes up to the given number of expired keys in expiry order. A live
-- lease is never expired: locked_until <= expires_at is a table constraint.
-- Namespace 3 holds PurgeEvery's lease (one row): it is never purged, so
-- that a purger's batch cannot delete the lease it has just extended when
-- the statements' clocks (read per statement) have moved past it.
DELETE FROM sqlonce_keys
WHERE expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND namespace <> 3
ORDER BY expires_at
LIMIT ?;

-- name: KeyPurgeList :many
-- Lists up to the given number of expired keys in expiry order, as
-- KeyPurge finds them, with a plain read that locks nothing. Through
-- vtgate a purge lists a shard's expired keys and deletes them one by one
-- by their primary key (KeyPurgeOne), in autocommit: KeyPurge's range scan
-- on expires_at also locks the first row past the expired ones, which can
-- be PurgeEvery's lease, held by the purging batch's own transaction on
-- another connection.
SELECT namespace, scope, idempotency_key
FROM sqlonce_keys
WHERE expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND namespace <> 3
ORDER BY expires_at
LIMIT ?;

-- name: KeyPurgeOne :execrows
-- Deletes one key that KeyPurgeList listed, if it is still expired (a
-- claim may have taken it over since).
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND)
  AND namespace <> 3;

-- name: KeyInspect :one
-- Reads one key for Store.Inspect: its times in microseconds since the
-- epoch (the columns hold UTC), the sizes of what it records, and whether
-- its lease holds and whether it has expired, as of the database's now.
SELECT
    state,
    token,
    CAST(LENGTH(fingerprint) AS SIGNED) AS fingerprint_len,
    CAST(response IS NOT NULL AS SIGNED) AS has_response,
    CAST(COALESCE(LENGTH(response), 0) AS SIGNED) AS response_len,
    CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at) AS SIGNED) AS created_us,
    CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS SIGNED) AS expires_us,
    CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', locked_until), 0) AS SIGNED) AS locked_until_us,
    CAST(COALESCE(state = 2 AND locked_until > COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND), 0) AS SIGNED) AS leased,
    CAST(expires_at <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND) AS SIGNED) AS expired
FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: KeyForget :execrows
-- Deletes one key for Store.Forget, unless a lease on it still holds and
-- force_held is false.
DELETE FROM sqlonce_keys
WHERE namespace = sqlc.arg(namespace) AND scope = sqlc.arg(scope) AND idempotency_key = sqlc.arg(idempotency_key)
  AND (sqlc.arg(force_held) OR state <> 2 OR locked_until <= COALESCE(CAST(sqlc.narg(now) AS DATETIME(6)), UTC_TIMESTAMP() + INTERVAL MICROSECOND(NOW(6)) MICROSECOND));
