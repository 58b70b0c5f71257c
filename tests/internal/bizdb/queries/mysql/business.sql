-- name: OrderInsert :execresult
INSERT INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount));

-- name: OrderGetByCode :one
-- A locking read: under REPEATABLE READ a plain SELECT reads the snapshot.
SELECT id, code, customer, amount, status, version FROM orders WHERE code = sqlc.arg(code) LOCK IN SHARE MODE;

-- name: OrderGetByID :one
SELECT id, code, customer, amount, status, version FROM orders WHERE id = sqlc.arg(id) LOCK IN SHARE MODE;

-- name: OrderAddAmount :execrows
UPDATE orders SET amount = amount + sqlc.arg(delta), version = version + 1
WHERE id = sqlc.arg(id) AND version = sqlc.arg(version);

-- name: OrderAddAmountAll :execrows
UPDATE orders SET amount = amount + sqlc.arg(delta), version = version + 1
WHERE version = sqlc.arg(version);

-- name: OrderGetVersion :one
SELECT version FROM orders WHERE id = sqlc.arg(id) LOCK IN SHARE MODE;

-- name: OrderGetVersionSnapshot :one
-- A plain read, to show the REPEATABLE READ snapshot trap.
SELECT version FROM orders WHERE id = sqlc.arg(id);

-- name: OrderGetByCodeSnapshot :one
-- A plain read, to show the REPEATABLE READ snapshot trap.
SELECT id, code, customer, amount, status, version FROM orders WHERE code = sqlc.arg(code);

-- name: OrderGetStatusSnapshot :one
-- A plain read, to show the REPEATABLE READ snapshot trap.
SELECT status FROM orders WHERE id = sqlc.arg(id);

-- name: OrderSetStatus :execrows
UPDATE orders SET status = sqlc.arg(to_status) WHERE id = sqlc.arg(id) AND status = sqlc.arg(from_status);

-- name: OrderGetStatus :one
SELECT status FROM orders WHERE id = sqlc.arg(id) LOCK IN SHARE MODE;

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
-- MySQL has no ON CONFLICT (code): the closest, ON DUPLICATE KEY UPDATE
-- with a no-op assignment, inserts nothing (0 rows, without
-- clientFoundRows) on a duplicate of any unique key, not only code.
INSERT INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount))
ON DUPLICATE KEY UPDATE id = id;

-- name: OrderInsertIgnore :execrows
-- INSERT IGNORE: a duplicate on any unique key inserts nothing, and NOT
-- NULL, foreign-key and conversion errors become warnings.
INSERT IGNORE INTO orders (code, customer, amount) VALUES (sqlc.arg(code), sqlc.arg(customer), sqlc.arg(amount));

-- name: ShipmentInsert :exec
INSERT INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier));

-- name: ShipmentInsertIfAbsent :execrows
INSERT INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier))
ON DUPLICATE KEY UPDATE id = id;

-- name: ShipmentInsertIgnore :execrows
INSERT IGNORE INTO shipments (code, order_id, carrier) VALUES (sqlc.arg(code), sqlc.arg(order_id), sqlc.narg(carrier));

-- name: ShipmentCountByCode :one
SELECT count(*) FROM shipments WHERE code = sqlc.arg(code);
