-- +goose Up
-- sqlonce_keys holds one row per claimed idempotency key. Scope and key are
-- VARBINARY so they compare byte for byte: no case folding, no pad-space.
-- Times are UTC (UTC_TIMESTAMP), independent of the session time zone.
--
-- state: 1 = done (the row commits together with the work it guards),
--        2 = leased (lease mode: the work runs outside the database until
--            locked_until; token fences late completions).
CREATE TABLE sqlonce_keys (
    scope           VARBINARY(255) NOT NULL,
    idempotency_key VARBINARY(255) NOT NULL,
    fingerprint     VARBINARY(64)  NOT NULL DEFAULT '',
    response        MEDIUMBLOB     NULL,
    state           SMALLINT       NOT NULL,
    token           BIGINT         NOT NULL,
    locked_until    DATETIME(6)    NULL,
    created_at      DATETIME(6)    NOT NULL,
    expires_at      DATETIME(6)    NOT NULL,
    PRIMARY KEY (scope, idempotency_key),
    KEY sqlonce_keys_expires_at_idx (expires_at),
    CONSTRAINT sqlonce_keys_scope_check CHECK (LENGTH(scope) > 0),
    CONSTRAINT sqlonce_keys_key_check CHECK (LENGTH(idempotency_key) > 0),
    CONSTRAINT sqlonce_keys_state_check CHECK (state IN (1, 2)),
    CONSTRAINT sqlonce_keys_lease_check CHECK (locked_until IS NULL OR locked_until <= expires_at)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE sqlonce_keys;
