-- +goose Up
-- A shipment refers to its order (a foreign key) and names its carrier
-- (NOT NULL): the errors that unique's inserts must pass through, whatever
-- the form, next to the duplicates they judge.
CREATE TABLE shipments (
    id       bigserial PRIMARY KEY,
    code     text   NOT NULL,
    order_id bigint NOT NULL REFERENCES orders (id),
    carrier  text   NOT NULL,
    CONSTRAINT shipments_code_key UNIQUE (code)
);

-- +goose Down
DROP TABLE shipments;
