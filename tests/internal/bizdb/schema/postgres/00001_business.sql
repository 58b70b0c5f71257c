-- +goose Up
-- Example business tables for the tests and docs. They are not part of
-- sqlonce's migrations: they stand for the application's own tables.
CREATE TABLE orders (
    id         bigserial PRIMARY KEY,
    code       text   NOT NULL,
    customer   text   NOT NULL DEFAULT '',
    amount     bigint NOT NULL DEFAULT 0,
    status     text   NOT NULL DEFAULT 'created',
    version    bigint NOT NULL DEFAULT 1,
    CONSTRAINT orders_code_key UNIQUE (code),
    CONSTRAINT orders_ref_key UNIQUE (customer, amount)
);

-- ledger has no unique key on ref: only sqlonce keeps a ref from being
-- written twice. The tests count rows per ref.
CREATE TABLE ledger (
    id     bigserial PRIMARY KEY,
    ref    text   NOT NULL,
    amount bigint NOT NULL
);
CREATE INDEX ledger_ref_idx ON ledger (ref);

-- +goose Down
DROP TABLE ledger;
DROP TABLE orders;
