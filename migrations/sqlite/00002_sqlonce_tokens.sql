-- +goose Up
-- sqlonce_tokens holds one row per issued one-time token. Only the token's
-- SHA-256 hash is stored: a copy of the database file gives no one a token
-- they could submit. Times are microseconds since the Unix epoch, UTC,
-- from the database's clock.
--
-- consumed_at is set once, by the statement that consumes the token; the
-- row stays until it expires, so that a repeat of the same token is
-- recognised as already done rather than as unknown.
CREATE TABLE sqlonce_tokens (
    token_hash  BLOB    NOT NULL,
    scope       TEXT    NOT NULL,
    consumed_at INTEGER,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    CONSTRAINT sqlonce_tokens_pkey PRIMARY KEY (token_hash),
    CONSTRAINT sqlonce_tokens_hash_check CHECK (length(token_hash) = 32),
    CONSTRAINT sqlonce_tokens_scope_check CHECK (length(CAST(scope AS BLOB)) BETWEEN 1 AND 255)
) STRICT, WITHOUT ROWID;

-- Purge walks this index in expiry order, in small batches.
CREATE INDEX sqlonce_tokens_expires_at_idx ON sqlonce_tokens (expires_at);

-- +goose Down
DROP TABLE sqlonce_tokens;
