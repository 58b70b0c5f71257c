-- name: OrderInsert :one
INSERT INTO orders (code, customer, amount) VALUES (@code, @customer, @amount)
RETURNING id;

-- name: OrderGetByCode :one
SELECT id, code, customer, amount, status, version FROM orders WHERE code = @code;

-- name: OrderGetByID :one
SELECT id, code, customer, amount, status, version FROM orders WHERE id = @id;

-- name: OrderAddAmount :execrows
-- A relative update guarded by the version column.
UPDATE orders SET amount = amount + @delta, version = version + 1
WHERE id = @id AND version = @version;

-- name: OrderAddAmountAll :execrows
-- Deliberately not on a key: for the "more than one row" case.
UPDATE orders SET amount = amount + @delta, version = version + 1
WHERE version = @version;

-- name: OrderGetVersion :one
SELECT version FROM orders WHERE id = @id;

-- name: OrderGetVersionSnapshot :one
-- The same read as OrderGetVersion: PostgreSQL has no MySQL-style current
-- read; under REPEATABLE READ every SELECT reads the transaction's snapshot.
SELECT version FROM orders WHERE id = @id;

-- name: OrderGetByCodeSnapshot :one
SELECT id, code, customer, amount, status, version FROM orders WHERE code = @code;

-- name: OrderGetStatusSnapshot :one
SELECT status FROM orders WHERE id = @id;

-- name: OrderSetStatus :execrows
UPDATE orders SET status = @to_status WHERE id = @id AND status = @from_status;

-- name: OrderGetStatus :one
SELECT status FROM orders WHERE id = @id;

-- name: OrderDelete :execrows
DELETE FROM orders WHERE id = @id;

-- name: OrderCountByCode :one
SELECT count(*) FROM orders WHERE code = @code;

-- name: OrderCount :one
SELECT count(*) FROM orders;

-- name: LedgerInsert :exec
INSERT INTO ledger (ref, amount) VALUES (@ref, @amount);

-- name: LedgerCountByRef :one
SELECT count(*) FROM ledger WHERE ref = @ref;

-- name: LedgerExistsByRef :one
SELECT EXISTS (SELECT 1 FROM ledger WHERE ref = @ref);

-- name: LedgerCountPerRef :many
SELECT ref, count(*) AS n FROM ledger GROUP BY ref ORDER BY ref;

-- name: OrderInsertIfAbsent :execrows
-- unique.Inserted's statement: a duplicate code inserts nothing (0 rows);
-- a duplicate on any other unique constraint is still an error.
INSERT INTO orders (code, customer, amount) VALUES (@code, @customer, @amount)
ON CONFLICT (code) DO NOTHING;

-- name: OrderInsertIgnore :execrows
-- The untargeted form, wrong for unique.Inserted: a duplicate on any
-- unique constraint inserts nothing.
INSERT INTO orders (code, customer, amount) VALUES (@code, @customer, @amount)
ON CONFLICT DO NOTHING;

-- name: ShipmentInsert :exec
INSERT INTO shipments (code, order_id, carrier) VALUES (@code, @order_id, sqlc.narg(carrier));

-- name: ShipmentInsertIfAbsent :execrows
INSERT INTO shipments (code, order_id, carrier) VALUES (@code, @order_id, sqlc.narg(carrier))
ON CONFLICT (code) DO NOTHING;

-- name: ShipmentInsertIgnore :execrows
INSERT INTO shipments (code, order_id, carrier) VALUES (@code, @order_id, sqlc.narg(carrier))
ON CONFLICT DO NOTHING;

-- name: ShipmentCountByCode :one
SELECT count(*) FROM shipments WHERE code = @code;
