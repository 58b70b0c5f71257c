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
