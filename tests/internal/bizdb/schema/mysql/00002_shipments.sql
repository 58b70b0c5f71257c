-- +goose Up
-- A shipment refers to its order (a foreign key) and names its carrier
-- (NOT NULL): the errors that unique's inserts must pass through, whatever
-- the form, next to the duplicates they judge.
CREATE TABLE shipments (
    id       BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    code     VARCHAR(64) NOT NULL,
    order_id BIGINT      NOT NULL,
    carrier  VARCHAR(64) NOT NULL,
    UNIQUE KEY shipments_code_key (code),
    CONSTRAINT shipments_order_fk FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB;

-- +goose Down
DROP TABLE shipments;
