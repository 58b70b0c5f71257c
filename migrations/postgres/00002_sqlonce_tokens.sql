-- +goose Up
-- sqlonce_tokens holds one row per issued one-time token. Only the token's
-- SHA-256 hash is stored: a copy of the table (a backup, a replica, a read
-- by a support tool) gives no one a token they could submit. The hash is
-- the primary key: tokens are 256 random bits, unique without the scope,
-- and a lookup by hash alone tells a token of another scope from an
-- unknown one.
--
-- consumed_at is set once, by the statement that consumes the token; the
-- row stays until it expires, so that a repeat of the same token is
-- recognised as already done rather than as unknown.
CREATE TABLE sqlonce_tokens (
    token_hash  bytea            NOT NULL,
    scope       text COLLATE "C" NOT NULL,
    consumed_at timestamptz,
    created_at  timestamptz      NOT NULL,
    expires_at  timestamptz      NOT NULL,
    CONSTRAINT sqlonce_tokens_pkey PRIMARY KEY (token_hash),
    CONSTRAINT sqlonce_tokens_hash_check CHECK (octet_length(token_hash) = 32),
    CONSTRAINT sqlonce_tokens_scope_check CHECK (octet_length(scope) BETWEEN 1 AND 255)
);

-- Purge walks this index in expiry order, in small batches.
CREATE INDEX sqlonce_tokens_expires_at_idx ON sqlonce_tokens (expires_at);

-- +goose Down
DROP TABLE sqlonce_tokens;
