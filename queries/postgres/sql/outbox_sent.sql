-- name: OutboxSent :execrows
-- OutboxSent of queries/postgres/pgx for database/sql, whose drivers do
-- not all bind an array (lib/pq needs pq.Array): the leases come as text,
-- seq:token pairs separated by commas, and the seqs alone the same way
-- for the primary key's index.
UPDATE sqlonce_outbox AS o
SET state = 1, sent_at = coalesce(sqlc.narg('now')::timestamptz, now()), locked_until = NULL, last_error = ''
WHERE o.seq = ANY(string_to_array(sqlc.arg('seqs')::text, ',')::bigint[])
  AND (o.seq::text || ':' || o.lease_token::text) = ANY(string_to_array(sqlc.arg('leases')::text, ','))
  AND o.state = 0 AND o.locked_until IS NOT NULL;
