// Package sqlonce makes operations idempotent using nothing but the SQL
// database the application already has.
//
// A double-clicked button, a client retry after a timeout, a message the
// broker redelivers: the same request arrives twice, and must not charge a
// card twice. sqlonce lets a database constraint or an atomic conditional
// statement decide, inside the caller's own transaction, so that the
// marker and the business write commit or roll back together.
//
// The strategies live in their own packages:
//
//   - [github.com/sqlonce/sqlonce/dedupe]: a processed-keys table claimed in
//     the same transaction as the work, with response replay, request
//     fingerprints, expiry and a lease mode for work outside the database;
//   - [github.com/sqlonce/sqlonce/optimistic]: version-column updates judged
//     by their affected rows;
//   - [github.com/sqlonce/sqlonce/statemachine]: status transitions, with
//     "already past" read from the declared transitions;
//   - [github.com/sqlonce/sqlonce/unique]: inserts whose duplicate key on a
//     named constraint means "already done";
//   - [github.com/sqlonce/sqlonce/token]: one-time tokens, issued before the
//     operation and consumed once in its transaction;
//   - [github.com/sqlonce/sqlonce/inbox]: message consumers that apply each
//     message once, built on dedupe;
//   - [github.com/sqlonce/sqlonce/httpidem]: net/http middleware for the
//     Idempotency-Key header, built on dedupe.
//
// Each answers with a [Result]: [FirstRun] (this call did the work) or
// [AlreadyDone] (an earlier call did), plus the recorded response where
// there is one. Failures are errors that errors.Is matches against the
// sentinels of this package, and [IsRetryable] tells which ones ask for the
// transaction to run again.
//
// # Transactions
//
// One rule holds in every package. A function or method that takes the
// caller's transaction (a TTx argument) runs inside it and never commits
// or rolls it back (at most to a savepoint of its own); a nil one is
// [ErrInvalidArgument] before any SQL runs. One that takes no TTx runs in
// transactions of its own on the driver's database handle, or as single
// statements committed on their own, and
// commits a transaction it hands to a function when that function returns
// nil. Where both exist, X runs in its own and XTx in the caller's
// (dedupe's Claim and ClaimTx, token's Issue and IssueTx, inbox's Handle
// and HandleTx); dedupe's Do takes tx, its Run begins its own. Outside
// the rule: optimistic.Update, statemachine's Transition and
// unique.Inserted run no SQL, judging the caller's statements; and
// httpidem.NewWithTxFunc has the caller's function begin and end the
// middleware's transactions.
//
// # Drivers
//
// The strategies that run SQL of their own (dedupe, unique, token, inbox,
// httpidem) take a [Driver] for the caller's database library, generic over
// its transaction type: [github.com/sqlonce/sqlonce/pgxdriver] for pgx.Tx
// (PostgreSQL), [github.com/sqlonce/sqlonce/pgsqldriver] for *sql.Tx
// (PostgreSQL through database/sql: pgx's stdlib or lib/pq),
// [github.com/sqlonce/sqlonce/mysqldriver] for *sql.Tx (MySQL and MariaDB)
// and [github.com/sqlonce/sqlonce/sqlitedriver] for *sql.Tx (SQLite:
// modernc.org/sqlite or mattn/go-sqlite3). The dialect follows from the
// driver. A database/sql driver refuses a handle or a transaction of
// another database with [ErrInvalidArgument]: at New when the handle's
// database/sql driver is a known library's, or, for one it does not know
// (a wrapper), from one probe of the server at the first call.
//
// Each driver package links its own database library and teaches
// [IsRetryable] and [IsCommitUnknown] that library's errors when a
// program imports it; this package and the strategy packages link no
// database library. When the connection is lost while a transaction that
// sqlonce commits itself is committing, the error matches
// [ErrCommitUnknown]: resend with the same key.
//
// # Zero values
//
// One rule for every option, TTL and limit: 0 takes the default (a TTL, a
// size or a batch of 0 has no useful meaning, and is what a field left
// unset holds), a negative value or one over its bound is
// [ErrInvalidArgument]. So dedupe.WithTTL(0), Request.TTL 0,
// WithMaxResponseSize(0), Purge(ctx, 0) and PurgeTx(ctx, tx, 0), and their
// token, inbox and httpidem equivalents, are the defaults. A wait of 0
// (dedupe.WithLockWait, httpidem.WithWait) waits not at all. Lengths that
// have no default, the lease of dedupe.Store.Claim and a no-repeat window,
// must be positive (a lease of 0 to httpidem.NewLeased is httpidem.DefaultLease).
//
// # Observing
//
// An [Observer] receives one [Event] per operation: the strategy, the
// operation, the scope (never the key), its status (first run, replayed,
// in progress, key reuse, lease lost...), the attempts and what made
// sqlonce retry, the time spent deciding the key and in the caller's
// function, and the response size. Attach it once, to the driver, with
// [Observe]: every strategy built on the returned driver reports to it.
// optimistic and statemachine take no driver; they report to the Observer
// in their ctx ([ContextWithObserver]). [SlogObserver] logs the events with
// log/slog; the module github.com/sqlonce/sqlonce/sqlonceotel turns them
// into OpenTelemetry metrics and spans, and only programs that import it
// depend on OpenTelemetry.
//
// The Observer is an interface called after each operation rather than a
// middleware around it: the strategies stay free of any import beyond the
// standard library, an operation without an Observer pays one nil check
// and no allocation, and one Observer serves every strategy. The price is
// that an Observer cannot change the context the caller's function sees:
// a span made from an Event is a sibling, not a parent, of the spans the
// function starts.
//
// # Schema
//
// The tables come as goose migrations in
// [github.com/sqlonce/sqlonce/migrations], embedded and runnable from code,
// or from the goose command line.
package sqlonce
