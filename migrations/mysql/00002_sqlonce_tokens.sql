-- +goose Up
-- sqlonce_tokens holds one row per issued one-time token. Only the token's
-- SHA-256 hash is stored: a copy of the table gives no one a token they
-- could submit. Hash and scope are VARBINARY so they compare byte for
-- byte: no case folding, no pad-space. Times are UTC.
--
-- consumed_at is set once, by the statement that consumes the token; the
-- row stays until it expires, so that a repeat of the same token is
-- recognised as already done rather than as unknown.
CREATE TABLE sqlonce_tokens (
    token_hash  VARBINARY(32)  NOT NULL,
    scope       VARBINARY(255) NOT NULL,
    consumed_at DATETIME(6)    NULL,
    created_at  DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (token_hash),
    KEY sqlonce_tokens_expires_at_idx (expires_at),
    CONSTRAINT sqlonce_tokens_hash_check CHECK (LENGTH(token_hash) = 32),
    CONSTRAINT sqlonce_tokens_scope_check CHECK (LENGTH(scope) > 0)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE sqlonce_tokens;
