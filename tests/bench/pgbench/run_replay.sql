\set r random(1, 1000)
\startpipeline
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_try_advisory_xact_lock(1936289646, hashtext('1' || ':' || 'd' || 'k' || CAST(:r AS text))), k.fingerprint, k.response, k.state, k.token
 FROM (SELECT 1) AS one LEFT JOIN pgb.sqlonce_keys AS k ON k.scope = 'd' AND k.idempotency_key = 'k' || CAST(:r AS text);
\endpipeline
ROLLBACK;
