// Package restart runs the exactly-once checker while the database server
// is killed and started again under load. Its tests start a throwaway
// PostgreSQL and a throwaway MariaDB of their own (child processes on free
// ports, data in temp dirs), point the test harness at them through
// SQLONCE_POSTGRES_DSN / SQLONCE_MYSQL_DSN, and never touch the shared
// servers. They need the server binaries and root (to run each server as
// its own user); without them they skip, except under CI=true, where they
// fail.
//
// The servers are started once per test process, before the harness first
// resolves a server, so every test of this package runs against them.
package restart
