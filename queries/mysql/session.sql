-- sqlc's MySQL engine ignores SET statements, so the driver issues
-- "SET SESSION innodb_lock_wait_timeout = ?" itself (mysqldriver).

-- name: LockWaitTimeoutGet :one
-- The session's lock wait timeout, to restore it after a bounded claim, and
-- whether a lock wait timeout rolls back the whole transaction rather than
-- the statement.
SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS SIGNED) AS seconds,
       CAST(@@GLOBAL.innodb_rollback_on_timeout AS SIGNED) AS rollback_on_timeout;

