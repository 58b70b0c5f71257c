-- name: LockTimeoutSet :one
-- Sets lock_timeout for the rest of the current (sub)transaction and returns
-- the value it replaces, so that a bounded claim can restore it.
SELECT current_setting('lock_timeout')::text AS previous,
       set_config('lock_timeout', sqlc.arg(value)::text, true)::text AS current;

-- name: BackendPID :one
-- The server process of the session: an OutboxListener compares it with
-- the one the connection's startup announced (BackendKeyData), which a
-- pooler in between (PgBouncer) makes up, and then listens on nothing.
SELECT pg_backend_pid()::integer AS pid;
