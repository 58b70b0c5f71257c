\set r random(1, 1000000000)
BEGIN;
INSERT INTO pgb.sqlonce_keys (scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at)
 VALUES ('s', 'p' || :r || '-' || :client_id, '\x'::bytea, 1, 1, NULL, now(), now() + interval '1 day')
 ON CONFLICT DO NOTHING RETURNING token;
INSERT INTO pgb.ledger (ref, amount) VALUES ('p' || :r || '-' || :client_id, 100);
COMMIT;
