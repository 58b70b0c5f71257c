-- +goose Up
-- A shipment refers to its order (a foreign key) and names its carrier
-- (NOT NULL): the errors that unique's inserts must pass through, whatever
-- the form, next to the duplicates they judge.
CREATE TABLE shipments (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    code     TEXT    NOT NULL,
    order_id INTEGER NOT NULL REFERENCES orders (id),
    carrier  TEXT    NOT NULL
) STRICT;
CREATE UNIQUE INDEX shipments_code_key ON shipments (code);

-- +goose Down
DROP TABLE shipments;
