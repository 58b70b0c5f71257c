\set r random(1, 1000)
\startpipeline
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_advisory_xact_lock(1936289646, hashtext('1' || ':' || 'd' || 'k' || CAST(:r AS text)));
SELECT fingerprint, response, state, token FROM pgb.sqlonce_keys WHERE scope = 'd' AND idempotency_key = 'k' || CAST(:r AS text);
\endpipeline
ROLLBACK;
