// Package migrations holds sqlonce's schema as goose SQL migrations, one
// folder per dialect, embedded in the binary.
//
// Run them from code with [Up] (or [NewProvider] for status and down); they
// record their version in their own table, [TableName], so they never touch
// the application's goose_db_version. Or point your own goose at the folder:
//
//	goose -dir migrations/postgres -table sqlonce_goose_db_version postgres "$DSN" up
//	goose -dir migrations/mysql    -table sqlonce_goose_db_version mysql    "$DSN" up
//	goose -dir migrations/sqlite   -table sqlonce_goose_db_version sqlite3  ./app.db up
//
// sqlc reads the same files as its schema, so the generated queries always
// match the tables.
//
// # Concurrent runs and poolers
//
// On PostgreSQL, Up takes an advisory lock so that instances starting at
// once run the migrations one after another. The lock is the schema's
// (the first of the connection's search_path that exists): migrations of
// sqlonce's tables in different schemas of one database do not wait for
// each other. The lock is taken by a
// transaction of its own (pg_advisory_xact_lock) on a second connection of
// db and held until the migrations end, which works through a pooler in
// transaction mode (PgBouncer): a session lock would be released by a
// statement the pooler may send to another server connection, and stay
// held. With db.SetMaxOpenConns(1) there is no second connection, and Up
// falls back to goose's session lock: run it directly against PostgreSQL
// then, not through a transaction pooler. A handle whose limit database/sql
// cannot see (stdlib.OpenDBFromPool on a pgx pool of one connection) that
// gives no second connection within 2 s runs the migrations without the
// lock: concurrent runs then race on the version table, and all but one
// fail.
package migrations
