-- +goose Up
-- namespace keeps the keys of each sqlonce package apart: 0 = dedupe (a
-- Store's Request scopes), 1 = inbox (consumer names), 2 = httpidem
-- (request keys). Without it an inbox consumer's name was a dedupe scope,
-- and a message id it applied answered AlreadyDone to a dedupe call with
-- that scope and key. The primary key leads with it, so that every lookup
-- stays one index probe.
--
-- Rows written before this migration become dedupe keys (namespace 0):
-- an inbox or httpidem key recorded before the upgrade is no longer found
-- by them, and a redelivery or a retry of it runs again.
ALTER TABLE sqlonce_keys
    ADD COLUMN namespace smallint NOT NULL DEFAULT 0,
    ADD CONSTRAINT sqlonce_keys_namespace_check CHECK (namespace >= 0),
    DROP CONSTRAINT sqlonce_keys_pkey,
    ADD CONSTRAINT sqlonce_keys_pkey PRIMARY KEY (namespace, scope, idempotency_key);

-- +goose Down
-- Refused while two namespaces hold one (scope, key): the old primary key
-- cannot hold both.
ALTER TABLE sqlonce_keys
    DROP CONSTRAINT sqlonce_keys_pkey,
    ADD CONSTRAINT sqlonce_keys_pkey PRIMARY KEY (scope, idempotency_key),
    DROP CONSTRAINT sqlonce_keys_namespace_check,
    DROP COLUMN namespace;
