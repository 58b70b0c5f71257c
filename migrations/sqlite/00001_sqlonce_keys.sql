-- +goose Up
-- sqlonce_keys holds one row per claimed idempotency key. Scope and key are
-- TEXT with SQLite's default BINARY collation: compared byte for byte, never
-- case- or pad-insensitively. STRICT refuses a value of the wrong type.
--
-- Times are integers: microseconds since the Unix epoch, UTC, from the
-- database's clock (unixepoch('subsec'), millisecond resolution).
--
-- state: 1 = done (the row commits together with the work it guards),
--        2 = leased (lease mode: the work runs outside the database until
--            locked_until; token fences late completions).
CREATE TABLE sqlonce_keys (
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

-- Purge walks this index in expiry order, in small batches.
CREATE INDEX sqlonce_keys_expires_at_idx ON sqlonce_keys (expires_at);

-- +goose Down
DROP TABLE sqlonce_keys;
