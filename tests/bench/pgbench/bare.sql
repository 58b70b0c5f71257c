\set r random(1, 1000000000)
BEGIN;
INSERT INTO pgb.ledger (ref, amount) VALUES ('b' || :r || '-' || :client_id, 100);
COMMIT;
