// Package failover runs sqlonce against replicated servers the tests start
// themselves (tests/internal/dbserver): a PostgreSQL primary with a
// pg_basebackup hot standby, a MariaDB primary with a GTID replica. It
// shows what a client is told when pointed at a server that takes no
// writes, how the errors of a failover are classified, and what a
// promoted standby keeps when the primary is killed under load, with
// asynchronous and with synchronous (semi-synchronous) replication.
package failover
