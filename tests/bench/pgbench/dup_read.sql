\set r random(1, 1000)
BEGIN;
INSERT INTO pgb.sqlonce_keys (scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at)
 VALUES ('d', 'k' || :r, '\x'::bytea, 1, 1, NULL, now(), now() + interval '1 day')
 ON CONFLICT DO NOTHING RETURNING token;
SELECT token, response FROM pgb.sqlonce_keys WHERE scope = 'd' AND idempotency_key = 'k' || :r;
COMMIT;
