\set r random(1, 1000000000000000)
\startpipeline
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT pg_try_advisory_xact_lock(1936289646, hashtext('3' || ':' || 'srv' || 'v' || CAST(:r AS text) || '-' || CAST(:client_id AS text))), k.fingerprint, k.response, k.state, k.token
 FROM (SELECT 1) AS one LEFT JOIN pgb.sqlonce_keys AS k ON k.scope = 'srv' AND k.idempotency_key = 'v' || CAST(:r AS text) || '-' || CAST(:client_id AS text);
\endpipeline
INSERT INTO pgb.ledger (ref, amount) VALUES ('v' || CAST(:r AS text) || '-' || CAST(:client_id AS text), 100);
\startpipeline
INSERT INTO pgb.sqlonce_keys (scope, idempotency_key, fingerprint, response, state, token, locked_until, created_at, expires_at)
 VALUES ('srv', 'v' || CAST(:r AS text) || '-' || CAST(:client_id AS text), '\x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'::bytea,
         '\x7b226f72646572223a3132337d'::bytea, 1, 1, NULL, now(), now() + interval '1 day');
COMMIT;
\endpipeline
