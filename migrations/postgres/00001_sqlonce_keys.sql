-- +goose Up
-- sqlonce_keys holds one row per claimed idempotency key. Scope and key are
-- compared byte for byte (COLLATE "C"), never case- or pad-insensitively.
--
-- state: 1 = done (the row commits together with the work it guards),
--        2 = leased (lease mode: the work runs outside the database until
--            locked_until; token fences late completions).
CREATE TABLE sqlonce_keys (
    scope           text COLLATE "C" NOT NULL,
    idempotency_key text COLLATE "C" NOT NULL,
    fingerprint     bytea            NOT NULL DEFAULT '\x'::bytea,
    response        bytea,
    state           smallint         NOT NULL,
    token           bigint           NOT NULL,
    locked_until    timestamptz,
    created_at      timestamptz      NOT NULL,
    expires_at      timestamptz      NOT NULL,
    CONSTRAINT sqlonce_keys_pkey PRIMARY KEY (scope, idempotency_key),
    CONSTRAINT sqlonce_keys_scope_check CHECK (octet_length(scope) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_key_check CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT sqlonce_keys_fingerprint_check CHECK (octet_length(fingerprint) <= 64),
    CONSTRAINT sqlonce_keys_state_check CHECK (state IN (1, 2)),
    CONSTRAINT sqlonce_keys_lease_check CHECK (locked_until IS NULL OR locked_until <= expires_at)
);

-- Purge walks this index in expiry order, in small batches.
CREATE INDEX sqlonce_keys_expires_at_idx ON sqlonce_keys (expires_at);

-- +goose Down
DROP TABLE sqlonce_keys;
