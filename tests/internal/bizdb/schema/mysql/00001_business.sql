-- +goose Up
-- Example business tables for the tests and docs. They are not part of
-- sqlonce's migrations: they stand for the application's own tables.
CREATE TABLE orders (
    id       BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    code     VARCHAR(64)  NOT NULL,
    customer VARCHAR(64)  NOT NULL DEFAULT '',
    amount   BIGINT       NOT NULL DEFAULT 0,
    status   VARCHAR(32)  NOT NULL DEFAULT 'created',
    version  BIGINT       NOT NULL DEFAULT 1,
    UNIQUE KEY orders_code_key (code),
    UNIQUE KEY orders_ref_key (customer, amount)
) ENGINE = InnoDB;

-- ledger has no unique key on ref: only sqlonce keeps a ref from being
-- written twice. The tests count rows per ref.
CREATE TABLE ledger (
    id     BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    ref    VARCHAR(64) NOT NULL,
    amount BIGINT      NOT NULL,
    KEY ledger_ref_idx (ref)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE ledger;
DROP TABLE orders;
