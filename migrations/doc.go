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
// fail. WithSchema's schema is created under the same lock, so instances
// creating it at once do not fail on each other.
//
// On MySQL and MariaDB, Up takes a user-level lock (GET_LOCK, named after
// the database and TableName) on a connection of its own, held around the
// whole run and released after it; the lock ends with its session if the
// process dies. A provider of NewProvider or NewSchemaProvider holds it
// around its migrations (goose's Up checks for pending ones first without
// a lock, and may then create the version table unlocked: run Up from
// code for a fleet). As on
// PostgreSQL, a handle with db.SetMaxOpenConns(1) runs without the lock,
// and so do Galera nodes that refuse GET_LOCK. Through Vitess's vtgate on
// a sharded keyspace, Up first checks that the VSchema has a vindex for
// each of sqlonce's tables and, when one is missing, returns an error
// matching ErrNoVindex that names the ALTER VSCHEMA statements to run,
// before creating anything.
//
// SQLite has no lock a run could hold across its migrations' own
// transactions: instances running Up at once on one file each apply what
// they find pending, a migration that another applied first fails whole
// (rolled back), and Up runs again as long as the database's version
// advanced since its previous try. Every instance then returns nil.
package migrations
