// Package checker is the exactly-once checker: a workload generator that
// drives every sqlonce strategy from many goroutines over a small key space,
// injects faults (errors and panics in the work, cancelled contexts,
// connections killed from another session, deadlocks and serialization
// failures, lease holders that die or complete late, callers arriving at
// a lease's deadline, connections cut at COMMIT or left half-open by a
// proxy), records what every attempt was told, and then proves from the
// database alone that no effect was lost or doubled.
//
// # What an attempt records
//
// Each attempt is one transaction (or one lease call). It records, per key
// it touched, the outcome the strategy reported and when (a logical clock
// shared by all workers), the response it was given, and how its commit
// ended: committed, rolled back, or unknown (the connection died while
// COMMIT was in flight). An unknown commit is "maybe committed": the
// database decides.
//
// dedupe.Store.Run commits on its own: its attempt is the Run call, on the
// keys of the Do, DoResponse and lease workloads, so that it races them
// (and takes lapsed leases over, at the pinned clock). It is committed when
// Run answers; when Run fails after its fn completed, the failure is that
// of its commit, unknown unless the error proves a rollback. Run calls fn
// again when it starts over, so effects are counted in the database, never
// by calls of fn.
//
// # What is checked afterwards
//
// Every business effect carries the id of the attempt that wrote it (the
// ledger amount, the order's customer), so the checker can name the writer
// of each effect it finds. For every key:
//   - at most one effect, and it was written by an attempt that reported
//     FirstRun and committed (or may have);
//   - every FirstRun that committed left its effect: nothing lost;
//   - the dedupe marker exists exactly when the effect does (they commit in
//     one transaction);
//   - an AlreadyDone was reported only after the writer began to commit;
//   - every replayed response equals the one recorded with the key, and
//     that one is the writer's;
//   - optimistic: each version step was taken by exactly one FirstRun;
//   - leases: one completion per key, by the newest claim's token, and no
//     key still held once every lease has lapsed.
//
// # The faults, and what each proves
//
// Drawn for a share of the attempts (Config.FaultRate), on every workload
// that runs a transaction, optimistic.Update and statemachine included:
//   - fn error, fn panic, rollback after success: the key's claim rolls
//     back with the work; the next attempt runs it (nothing lost, nothing
//     recorded for work undone);
//   - ctx cancelled in fn or at random, COMMIT included: a cancelled
//     transaction leaves nothing, or commits whole; a COMMIT the context
//     cut is resolved from the database;
//   - connection killed from another session in fn or at random
//     (pg_terminate_backend, KILL; not on SQLite): as a crash of the
//     server's side of one connection;
//   - lease holder dies, is late, releases: a lapsed lease is taken over
//     once, and fencing refuses the late completion (ErrLeaseLost).
//
// With Config.Proxy (TestPostgres, TestMySQL: a tests/internal/faultproxy
// in the test process between the pool and the server), the network
// faults of netfaults.go join them, armed on the attempt's own connection:
//   - reply to COMMIT lost: the server commits, the client's connection is
//     reset; the commit is unknown to the client, and the database must
//     name it the writer (no loss), and a resend with the same key must get
//     AlreadyDone (no double). A Run cut so must answer an error matching
//     sqlonce.ErrCommitUnknown;
//   - COMMIT lost: the connection is reset as COMMIT leaves; the server
//     rolls back, and the resend runs the work;
//   - half-open at COMMIT or in fn: the proxy stops forwarding without
//     closing; the client's deadline fires (or the proxy resets it after
//     a hold where the driver's COMMIT ignores the context), and only then
//     does the server's side end, its held bytes delivered (a COMMIT then
//     commits behind the back of a client that gave up) or dropped. Either
//     way the unknown commit is resolved from the database, and no effect
//     may appear twice.
//
// The LeaseDeadline workload (leasedeadline.go) races callers against the
// database's own clock: a holder's 15 ms lease lapses and DoResponse,
// Store.Run and Claim arrive within a millisecond of the deadline. An
// AlreadyDone for work nobody did yet is an early (and replay) violation:
// it caught SQLite judging a key by two readings of its clock.
//
// # Running it
//
// Run drives the workload and returns a Report. The tests in this package
// run it for 10 s on PostgreSQL, MariaDB and SQLite, and show that it is
// not a test that cannot fail: swapped in for the dedupe Store, a
// select-then-insert "dedupe" is caught doubling effects, a marker
// committed before the work is caught losing them, and an in-memory marker
// is caught answering AlreadyDone before anything committed; swapped in
// for Store.Run, work committed before its key is recorded is caught
// doubling effects. The restart subpackage runs the workload while the
// database server is killed and started again; the galera subpackage runs
// it over the three nodes of a MariaDB Galera cluster (Config.Nodes), one
// of which is killed and rejoins mid-run.
//
//	go test -race -count=1 ./checker/... -v
//	SQLONCE_CHECKER_DURATION=5m go test -count=1 ./checker/ -run 'TestPostgres|TestMySQL' -v
//	go test -count=1 ./checker/ -run TestMySQL -v -checker.duration=5m
//
// Workloads that hit a known library bug are listed in KnownBugs and left
// out on the affected database; SQLONCE_KNOWN_BUGS=1 runs them too.
package checker
