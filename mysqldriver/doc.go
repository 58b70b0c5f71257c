// Package mysqldriver is the sqlonce driver for MySQL and MariaDB through
// database/sql and github.com/go-sql-driver/mysql, including Galera
// clusters and Vitess. Strategies built on it take the *sql.Tx the caller
// already has.
//
// A [Driver] is safe for concurrent use; build one per *sql.DB and share
// it (drivers on one *sql.DB share its prepared statements, and there is
// nothing to close). The driver checks the topology at its first call on
// each *sql.DB and refuses every call, with an error matching
// sqlonce.ErrInvalidArgument that names the missing setting, when it is
// unsafe:
//
//   - on a Galera node, the DSN must set wsrep_sync_wait=1 (or 3) and
//     interpolateParams=true;
//   - through Vitess's vtgate, the session's transaction_mode must be
//     SINGLE or TWOPC, and a claim with a bounded lock wait and the outbox
//     (package outbox) are refused on a sharded keyspace.
//
// The outbox's relay claims with FOR UPDATE SKIP LOCKED: MariaDB 10.6 or
// MySQL 8.0 and later.
//
// Return every error of the work's statements to sqlonce: after a deadlock
// (1213) or, through vtgate, a cross-shard statement ([IsCrossShard]),
// MySQL has rolled the whole transaction back and runs what follows in
// autocommit.
//
// The settings each topology needs and why, statement caching and lock
// waits are in docs/drivers.md:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#mysql-and-mariadb-mysqldriver
package mysqldriver
