// Package pgsqldriver is the sqlonce driver for PostgreSQL through
// database/sql: pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib,
// "pgx") or lib/pq ("postgres"), under sqlx, GORM, ent or bun.
// Strategies built on it take the *sql.Tx the caller already has.
// Programs that hold a pgx.Tx use pgxdriver instead.
//
// A [Driver] is safe for concurrent use. It runs the same SQL as pgxdriver
// with the same results, one statement per round trip, and begins the
// transactions it runs itself READ COMMITTED. It recognises the errors of
// both libraries without linking either. A *sql.DB of another database's
// driver (MySQL, SQLite) is refused with an error matching
// sqlonce.ErrInvalidArgument.
//
// Round trips, PgBouncer with either library (lib/pq needs
// binary_parameters=yes for the program's own statements) and constraint
// names are in docs/drivers.md:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#postgresql-through-databasesql-pgsqldriver
package pgsqldriver
