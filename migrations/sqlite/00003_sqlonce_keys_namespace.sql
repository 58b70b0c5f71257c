-- +goose Up
-- namespace keeps the keys of each sqlonce package apart: 0 = dedupe (a
-- Store's Request scopes), 1 = inbox (consumer names), 2 = httpidem
-- (request keys). Without it an inbox consumer's name was a dedupe scope,
-- and a message id it applied answered AlreadyDone to a dedupe call with
-- that scope and key. The primary key leads with it, so that every lookup
-- stays one index probe.
--
-- SQLite cannot change the primary key of a table: the table is built
-- anew and the rows copied. Rows written before this migration become
-- dedupe keys (namespace 0): an inbox or httpidem key recorded before the
-- upgrade is no longer found by them, and a redelivery or a retry of it
-- runs again.
--
-- The statement below fails ("duplicate column name") when this migration
-- has already been applied: the rest of it could run twice on its own
-- result, and two instances running Up at once on a fresh file (goose
-- decides what is pending before its transaction) would then both record
-- version 3. The column it adds to the old table goes with that table.
ALTER TABLE sqlonce_keys ADD COLUMN namespace INTEGER;

CREATE TABLE sqlonce_keys_v3 (
    namespace       INTEGER NOT NULL DEFAULT 0,
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL DEFAULT x'',
    response        BLOB,
    state           INTEGER NOT NULL,
    token           INTEGER NOT NULL,
    locked_until    INTEGER,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    CONSTRAINT sqlonce_keys_pkey PRIMARY KEY (namespace, scope, idempotency_key),
    CONSTRAINT sqlonce_keys_namespace_check CHECK (namespace >= 0),
    CONSTRAINT sqlonce_keys_scope_check CHECK (length(CAST(scope AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_key_check CHECK (length(CAST(idempotency_key AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_fingerprint_check CHECK (length(fingerprint) <= 64),
    CONSTRAINT sqlonce_keys_state_check CHECK (state IN (1, 2)),
    CONSTRAINT sqlonce_keys_lease_check CHECK (locked_until IS NULL OR locked_until <= expires_at)
) STRICT, WITHOUT ROWID;

INSERT INTO sqlonce_keys_v3 (
    namespace, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
)
SELECT 0, scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
FROM sqlonce_keys;

DROP TABLE sqlonce_keys;
ALTER TABLE sqlonce_keys_v3 RENAME TO sqlonce_keys;

-- Purge walks this index in expiry order, in small batches.
CREATE INDEX sqlonce_keys_expires_at_idx ON sqlonce_keys (expires_at);

-- +goose Down
CREATE TABLE sqlonce_keys_v2 (
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    fingerprint     BLOB    NOT NULL DEFAULT x'',
    response        BLOB,
    state           INTEGER NOT NULL,
    token           INTEGER NOT NULL,
    locked_until    INTEGER,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    CONSTRAINT sqlonce_keys_pkey PRIMARY KEY (scope, idempotency_key),
    CONSTRAINT sqlonce_keys_scope_check CHECK (length(CAST(scope AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_key_check CHECK (length(CAST(idempotency_key AS BLOB)) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_fingerprint_check CHECK (length(fingerprint) <= 64),
    CONSTRAINT sqlonce_keys_state_check CHECK (state IN (1, 2)),
    CONSTRAINT sqlonce_keys_lease_check CHECK (locked_until IS NULL OR locked_until <= expires_at)
) STRICT, WITHOUT ROWID;

-- Refused (primary key) while two namespaces hold one (scope, key).
INSERT INTO sqlonce_keys_v2
SELECT scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at
FROM sqlonce_keys;

DROP TABLE sqlonce_keys;
ALTER TABLE sqlonce_keys_v2 RENAME TO sqlonce_keys;
CREATE INDEX sqlonce_keys_expires_at_idx ON sqlonce_keys (expires_at);
