// Package exampledb decides whether the runnable examples run: Main skips
// them, with a message naming the variable to set, when a database server
// they need does not answer, except under CI=true, where they run and
// fail. The servers come from SQLONCE_POSTGRES_DSN and SQLONCE_MYSQL_DSN,
// or the local defaults.
//
// Most packages' examples show every step of their setup themselves
// (connect, migrations.Up, CREATE TABLE), so that a reader can copy them.
// Postgres and MySQL still prepare a database for the examples that do
// not: a PostgreSQL schema or a MySQL/MariaDB database named after the
// example, recreated on every run, with sqlonce's migrations applied and
// two small business tables (orders, ledger).
package exampledb
