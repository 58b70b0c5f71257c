// Package pgxdriver is the sqlonce driver for PostgreSQL through
// github.com/jackc/pgx/v5. Strategies built on it take the pgx.Tx the
// caller already has, from a pgxpool.Pool, a pgx.Conn or a nested
// transaction.
//
// A [Driver] is safe for concurrent use. It pipelines the transactions it
// runs itself (dedupe's Store.Run: BEGIN travels with the claim, the
// record with COMMIT), and begins them READ COMMITTED.
//
// Through PgBouncer or another pooler in transaction mode, set pgx's query
// exec mode to one that keeps no named statement across transactions
// (default_query_exec_mode=exec in the DSN), and set search_path on the
// bouncer, not in the DSN: see
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#pgbouncer-and-other-transaction-poolers
package pgxdriver
