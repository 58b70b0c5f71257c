\set r random(1, 1000000000)
BEGIN;
INSERT INTO pgb.sqlonce_keys (scope, idempotency_key, fingerprint, state, token, locked_until, created_at, expires_at)
 VALUES ('s', 'u' || :r || '-' || :client_id, '\x'::bytea, 1, 1, NULL, now(), now() + interval '1 day')
 ON CONFLICT DO NOTHING RETURNING token;
INSERT INTO pgb.ledger (ref, amount) VALUES ('u' || :r || '-' || :client_id, 100);
UPDATE pgb.sqlonce_keys SET response = '\x7b226f72646572223a3132337d'::bytea
 WHERE scope = 's' AND idempotency_key = 'u' || :r || '-' || :client_id;
COMMIT;
