// Package failover runs sqlonce against replicated servers the tests start
// themselves (tests/internal/dbserver): a PostgreSQL primary with a
// pg_basebackup hot standby, a MariaDB primary with a GTID replica. It
// shows what a client is told when pointed at a server that takes no
// writes, how the errors of a failover are classified, and what a
// promoted standby keeps when the primary is killed under load, with
// asynchronous and with synchronous (semi-synchronous) replication; then
// what clients keep through the failover tools users run: a
// pg_auto_failover formation (tests/internal/autofailover) promoting its
// secondary by itself, and a Galera cluster behind HAProxy
// (tests/internal/haproxy) whose writer is killed.
package failover
