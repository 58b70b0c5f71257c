#!/usr/bin/env bash
# The raw-SQL anchor for the dedupe benchmarks: pgbench, 8 clients, the
# transactions sqlonce's paths amount to, against the bare one. run_first and
# run_replay are Store.Run on PostgreSQL: pgbench pipelines (\startpipeline)
# send BEGIN with the lock and lookup, and the record with COMMIT.
#   PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=test bash tests/bench/pgbench/run.sh
set -euo pipefail
cd "$(dirname "$0")"
T=${T:-10}
export PGOPTIONS="-c client_min_messages=warning"
psql -q -v ON_ERROR_STOP=1 <<'SQL'
DROP SCHEMA IF EXISTS pgb CASCADE;
CREATE SCHEMA pgb;
CREATE TABLE pgb.ledger (id bigserial PRIMARY KEY, ref text NOT NULL, amount bigint NOT NULL);
CREATE INDEX ON pgb.ledger (ref);
SET search_path = pgb;
SQL
# sqlonce_keys exactly as the migration creates it.
sed -n '/+goose Up/,/+goose Down/p' ../../../migrations/postgres/00001_sqlonce_keys.sql |
	grep -v '^-- +goose' | PGOPTIONS="$PGOPTIONS -c search_path=pgb" psql -q -v ON_ERROR_STOP=1
psql -q -c "INSERT INTO pgb.sqlonce_keys (scope, idempotency_key, state, token, created_at, expires_at, response)
            SELECT 'd', 'k' || i, 1, 1, now(), now() + interval '1 day', '\x00' FROM generate_series(1, 1000) i"
declare -A tps
for round in 1 2 3; do
	for f in bare claim claim_update dup_read run_first run_replay; do
		t=$(pgbench -n -c 8 -j 2 -T "$T" -M prepared -f "$f.sql" 2>/dev/null | awk '/^tps/ {print $3; exit}')
		tps[$f]+="$t "
		echo "round $round $f: $t tps"
	done
done
psql -q -c "DROP SCHEMA pgb CASCADE"
median() { tr ' ' '\n' | grep . | sort -n | sed -n 2p; }
base=$(echo "${tps[bare]}" | median)
for f in bare claim claim_update dup_read run_first run_replay; do
	m=$(echo "${tps[$f]}" | median)
	awk -v f="$f" -v b="$base" -v m="$m" 'BEGIN { printf "%-13s median %8.0f tps  time x%.2f\n", f, m, b / m }'
done
