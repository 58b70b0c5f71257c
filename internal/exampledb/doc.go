// Package exampledb decides whether the server drivers' runnable examples
// (pgxdriver, pgsqldriver, mysqldriver) run: Main skips them, with a
// message naming the variable to set, when a database server they need
// does not answer, except under CI=true, where they run and fail. The
// servers come from SQLONCE_POSTGRES_DSN and SQLONCE_MYSQL_DSN, or the
// local defaults. Every other package's examples run on SQLite and need no
// server.
//
// Postgres and MySQL prepare a database for tests: a PostgreSQL schema or
// a MySQL/MariaDB database named after the caller, recreated on every
// run, with sqlonce's migrations applied and two small business tables
// (orders, ledger).
package exampledb
