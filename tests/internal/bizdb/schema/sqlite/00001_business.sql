-- +goose Up
-- Example business tables for the tests and docs. They are not part of
-- sqlonce's migrations: they stand for the application's own tables.
-- The unique keys are named indexes: SQLite keeps no name for a UNIQUE
-- constraint written in CREATE TABLE, and unique.Insert finds an index by
-- its name. SQLite checks the most recently created index first, so
-- orders_code_key comes last: a repeat that collides on both is reported
-- on it, as on PostgreSQL and MySQL. AUTOINCREMENT never hands out an id
-- twice, as bigserial.
CREATE TABLE orders (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    code     TEXT    NOT NULL,
    customer TEXT    NOT NULL DEFAULT '',
    amount   INTEGER NOT NULL DEFAULT 0,
    status   TEXT    NOT NULL DEFAULT 'created',
    version  INTEGER NOT NULL DEFAULT 1
) STRICT;
CREATE UNIQUE INDEX orders_ref_key ON orders (customer, amount);
CREATE UNIQUE INDEX orders_code_key ON orders (code);

-- ledger has no unique key on ref: only sqlonce keeps a ref from being
-- written twice. The tests count rows per ref.
CREATE TABLE ledger (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    ref    TEXT    NOT NULL,
    amount INTEGER NOT NULL
) STRICT;
CREATE INDEX ledger_ref_idx ON ledger (ref);

-- +goose Down
DROP TABLE ledger;
DROP TABLE orders;
