-- name: OutboxSent :execrows
-- Marks as sent each message still leased with its token given, in one
-- statement: the leases come as two arrays, seq and token side by side.
UPDATE sqlonce_outbox AS o
SET state = 1, sent_at = coalesce(sqlc.narg('now')::timestamptz, now()), locked_until = NULL, last_error = ''
FROM (SELECT unnest(sqlc.arg('seqs')::bigint[]) AS seq, unnest(sqlc.arg('tokens')::bigint[]) AS token) AS l
WHERE o.seq = l.seq AND o.lease_token = l.token AND o.state = 0 AND o.locked_until IS NOT NULL;
