-- name: LockTimeoutSet :one
-- Sets lock_timeout for the rest of the current (sub)transaction and returns
-- the value it replaces, so that a bounded claim can restore it.
SELECT current_setting('lock_timeout')::text AS previous,
       set_config('lock_timeout', sqlc.arg(value)::text, true)::text AS current;
