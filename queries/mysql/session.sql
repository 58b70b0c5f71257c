-- sqlc's MySQL engine ignores SET statements, so the driver issues
-- "SET SESSION innodb_lock_wait_timeout = ?" itself (mysqldriver).

-- name: LockWaitTimeoutGet :one
SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS SIGNED) AS seconds;

