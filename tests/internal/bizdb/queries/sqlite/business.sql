-- name: OrderInsert :one
INSERT INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount))
RETURNING id;

-- name: OrderGetByCode :one
SELECT id, code, customer, amount, status, version FROM orders WHERE code = sqlc.arg(code);

-- name: OrderGetByID :one
SELECT id, code, customer, amount, status, version FROM orders WHERE id = sqlc.arg(id);

-- name: OrderAddAmount :execrows
-- A relative update guarded by the version column.
UPDATE orders SET amount = amount + sqlc.arg(delta), version = version + 1
WHERE id = sqlc.arg(id) AND version = sqlc.arg(version);

-- name: OrderAddAmountAll :execrows
-- Deliberately not on a key: for the "more than one row" case.
UPDATE orders SET amount = amount + sqlc.arg(delta), version = version + 1
WHERE version = sqlc.arg(version);

-- name: OrderGetVersion :one
SELECT version FROM orders WHERE id = sqlc.arg(id);

-- name: OrderGetVersionSnapshot :one
-- The same read as OrderGetVersion: SQLite has no MySQL-style current read;
-- every SELECT reads the transaction's snapshot, which under one writer at
-- a time is the latest once the transaction holds the write lock.
SELECT version FROM orders WHERE id = sqlc.arg(id);

-- name: OrderGetByCodeSnapshot :one
SELECT id, code, customer, amount, status, version FROM orders WHERE code = sqlc.arg(code);

-- name: OrderGetStatusSnapshot :one
SELECT status FROM orders WHERE id = sqlc.arg(id);

-- name: OrderSetStatus :execrows
UPDATE orders SET status = sqlc.arg(to_status) WHERE id = sqlc.arg(id) AND status = sqlc.arg(from_status);

-- name: OrderGetStatus :one
SELECT status FROM orders WHERE id = sqlc.arg(id);

-- name: OrderDelete :execrows
DELETE FROM orders WHERE id = sqlc.arg(id);

-- name: OrderCountByCode :one
SELECT count(*) FROM orders WHERE code = sqlc.arg(code);

-- name: OrderCount :one
SELECT count(*) FROM orders;

-- name: LedgerInsert :exec
INSERT INTO ledger (ref, amount) VALUES (sqlc.arg(ref), sqlc.arg(amount));

-- name: LedgerCountByRef :one
SELECT count(*) FROM ledger WHERE ref = sqlc.arg(ref);

-- name: LedgerExistsByRef :one
SELECT EXISTS (SELECT 1 FROM ledger WHERE ref = sqlc.arg(ref));

-- name: LedgerCountPerRef :many
SELECT ref, count(*) AS n FROM ledger GROUP BY ref ORDER BY ref;

-- name: OrderInsertIfAbsent :execrows
-- unique.Inserted's statement: a duplicate code inserts nothing (0 rows);
-- a duplicate on any other unique constraint is still an error.
INSERT INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount))
ON CONFLICT (code) DO NOTHING;

-- name: OrderInsertIgnore :execrows
-- The untargeted form, wrong for unique.Inserted: a duplicate on any
-- unique constraint inserts nothing.
INSERT INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount))
ON CONFLICT DO NOTHING;

-- name: ShipmentInsert :exec
INSERT INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier));

-- name: ShipmentInsertIfAbsent :execrows
INSERT INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier))
ON CONFLICT (code) DO NOTHING;

-- name: ShipmentInsertIgnore :execrows
INSERT INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier))
ON CONFLICT DO NOTHING;

-- name: ShipmentCountByCode :one
SELECT count(*) FROM shipments WHERE code = sqlc.arg(code);
