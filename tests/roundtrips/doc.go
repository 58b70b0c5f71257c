// Package roundtrips holds sqlonce's performance regression test in the
// unit that does not depend on the machine: round trips and statements per
// operation.
//
// On a network every round trip costs a fixed latency, whatever the CPU;
// on a shared 2-core machine a timed ratio moves by a quarter between runs.
// A count does not move: TestRoundTrips runs every path of every strategy
// (dedupe Do, DoResponse, Run first run, replay and takeover, lease Claim,
// Complete and Release, unique Insert and InsertOrGet, optimistic,
// statemachine, token Issue and Consume, inbox Handle, httpidem first run
// and replay) against the real databases and fails when a count differs
// from the table in counts_test.go, which docs/benchmarks.md repeats with
// the minimum each path needs.
//
// How it counts:
//
//   - PostgreSQL, through pgx (pgxdriver) and through database/sql with
//     pgx's stdlib (pgsqldriver), and MariaDB (go-sql-driver/mysql) are
//     reached through a TCP proxy on loopback (tests/internal/wire). A round trip is a turn
//     of the byte stream: the client sent, then the server answered. That
//     is what a network sees and what its latency multiplies: a pipeline
//     (pgx batches, BEGIN sent with a statement) is one round trip however
//     many statements it carries, and a message that needs no answer
//     (COM_STMT_CLOSE) costs none. Statements are read from the client's
//     half of the protocol: PostgreSQL's Query and Execute messages,
//     MySQL's COM_QUERY and COM_STMT_EXECUTE; BEGIN and COMMIT count,
//     prepares do not.
//   - SQLite has no wire: a database/sql connector wrapper counts the
//     statements the driver runs (Exec, Query, BEGIN, COMMIT, ROLLBACK).
//
// Each count includes the caller's own BEGIN and COMMIT where the path runs
// in the caller's transaction, and one business statement (a ledger INSERT
// or an order UPDATE), so that a row reads against the bare transaction's
// 3. The application's statements take one round trip each
// (interpolateParams on MariaDB, pgx's statement cache), as sqlonce's own
// prepared statements do. Every path runs a few times first, so that
// statements are prepared on each pooled connection, and then three times
// counted; the fewest is kept, since a statement not yet prepared on the
// connection the pool hands out costs a prepare more, never less.
package roundtrips
