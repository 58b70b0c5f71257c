// Package dedupe runs an operation once per idempotency key, with the key
// claimed in the same database transaction as the operation's own writes.
//
// A [Store] keeps one row per (scope, key) in the sqlonce_keys table (see
// package [github.com/sqlonce/sqlonce/migrations]). Inside the caller's
// transaction, [Store.Do] claims the key and runs the work only if the
// claim is won; the claim commits or rolls back with the work, so a crash
// can neither lose a request (the marker was written, the work was not) nor
// run it twice (the work was written, the marker was not):
//
//	store, err := dedupe.New(pgxdriver.New(pool))
//	...
//	tx, err := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	res, err := store.Do(ctx, tx, dedupe.Request{Scope: "payments", Key: idemKey},
//		func(ctx context.Context) error {
//			_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", ref, 100)
//			return err
//		})
//	if err != nil { ... }
//	err = tx.Commit(ctx)
//	// res.FirstRun(): this call charged; res.AlreadyDone(): an earlier one did.
//
// The work is never decided by a prior read: the unique index on
// (scope, key) decides. A concurrent duplicate waits on that index until the
// first transaction ends, then sees AlreadyDone (it committed) or wins the
// claim itself (it rolled back).
//
// # A transaction of the Store's own: Run
//
// When the transaction exists only for this operation (an HTTP handler, a
// message handler), let the Store own it: [Store.Run] begins it, claims
// the key, runs fn with it, records fn's response with the key and
// commits. It is the fast path, because sqlonce then chooses the round
// trips: on PostgreSQL through pgx, BEGIN travels with the claim and the
// record with COMMIT, so a first run costs the round trips of the bare
// transaction and a repeat costs two; through database/sql
// (MySQL/MariaDB, pgsqldriver) a repeat is one read, outside any
// transaction. fn may run more than once (Run starts over after a
// deadlock, a serialization failure, or a key recorded by another
// transaction while fn ran), so it does its work through tx only:
//
//	res, err := store.Run(ctx, dedupe.Request{Scope: "payments", Key: idemKey, Fingerprint: fp},
//		func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//			_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", ref, 100)
//			return receipt, err
//		})
//
// [RunJSON] is Run for a Go value. Use Do to make one step of a larger
// transaction of yours idempotent.
//
// Where a driver can make a first run cheaper at the cost of a repeat, or
// the other way round, [WithFavor] chooses: [FavorFirstRuns] spares
// MySQL/MariaDB and PostgreSQL through database/sql the read before the
// work (a first run in the round trips of the bare transaction plus one;
// a repeat then runs fn and rolls it back), [FavorRepeats] answers a
// repeat on PostgreSQL through pgx in one round trip instead of two (a
// first run pays one more).
//
// # Replaying the first answer
//
// [Store.DoResponse] and [DoJSON] record the first run's response with the
// key, in the same transaction, and hand it back byte for byte to every
// repeat in [github.com/sqlonce/sqlonce.Result].Response: a client that
// retries cannot tell a retry from the first call. Responses are limited to
// [DefaultMaxResponseSize] bytes unless [WithMaxResponseSize] says otherwise
// (at most [MaxResponseSize]); a larger one is an error matching
// [github.com/sqlonce/sqlonce.ErrResponseTooLarge].
//
// [DoJSON] and [RunJSON] record Go values with encoding/json: times keep
// their instant to the nanosecond and their offset, UUIDs ([16]byte),
// *big.Int of any size and compact json.RawMessage come back as they
// went (DoJSON says what does not). [WithCodec] gives a Store another
// [Codec] (gob, CBOR, MessagePack, protobuf, a faster JSON).
//
// # Batches
//
// [Store.DoBatch] claims many keys of one scope in the caller's
// transaction in a constant number of statements and runs fn once with
// the new ones: a consumer applying a batch of messages pays the round
// trips of one claim, not one per message. [Store.RunBatch] is the same in
// a transaction of the Store's own, as Run is DoResponse in one: through
// pgx BEGIN travels with the claim, so a batch whose fn sends one
// statement takes the bare transaction's three round trips. Package
// [github.com/sqlonce/sqlonce/inbox] wraps them for message consumers.
//
// # Fingerprints
//
// A key presented again with a different request is a client bug, or an
// attack: set [Request].Fingerprint to a hash of the request ([Fingerprint],
// [FingerprintJSON]) and such a repeat gets
// [github.com/sqlonce/sqlonce.ErrKeyReuse], never someone else's answer.
//
// # Scopes
//
// Keys are unique per [Request].Scope. For caller-supplied serial numbers,
// use the authenticated caller's id as the scope and its serial number as
// the key: one caller can neither collide with nor read another caller's
// keys. Scopes and keys compare byte for byte (no case folding, no
// pad-space), 1 to [github.com/sqlonce/sqlonce.MaxKeyLen] bytes of UTF-8.
//
// # Expiry and purge
//
// Keys live for [DefaultTTL] (24 hours) unless [WithTTL] or [Request].TTL
// say otherwise. An expired key counts as absent: the next claim takes it
// over atomically. [Store.Purge] deletes expired keys in bounded batches,
// each in a short transaction, and can run from several instances at once.
// [Store.PurgeEvery] runs it in the background, every interval until its
// context ends, started with one call in every instance of a program:
// the instances elect one that purges (a lease on a reserved row of
// sqlonce_keys, fenced by its token, so it needs no advisory lock and works
// through PgBouncer's transaction pooling, on Galera and on SQLite) and
// the others skip; each round is reported to the Observer. A cron job
// running the sqlonce command's purge does the same from outside.
// Every time comparison uses the database's clock, never the
// application's.
//
// # In progress
//
// By default a duplicate waits for the transaction holding the key. A
// caller that must not wait builds its Store with [WithNoWait] (or
// [WithLockWait] for a bounded wait) and gets
// [github.com/sqlonce/sqlonce.ErrInProgress] instead; its transaction stays
// usable.
//
// # Work outside the database: leases
//
// When the work cannot sit inside a database transaction (a payment
// provider's API, an email), use a lease: [Store.Claim] claims the key and
// commits at once (in autocommit where the driver can, else in a short
// transaction of its own) with a deadline and a fencing token, the
// work runs, then [Store.Complete] records the response or [Store.Release]
// lets a retry run it. A crashed holder's lease lapses and the next claimer
// takes over with a larger token; a late Complete with the old token gets
// [github.com/sqlonce/sqlonce.ErrLeaseLost] and changes nothing. A holder
// that works to its caller's deadline claims with [WithinDeadline]: the
// lease then ends at most a margin after ctx's deadline, so that a retry
// after the caller timed out is not kept out for the whole lease.
//
// # Operations of several steps: RunSteps and the completer
//
// An [Operation] is a list of named steps run under one key by
// [Store.RunSteps]: reserve the stock, charge the card, write the order,
// send the receipt. A database step ([Step].InTx) runs in a transaction
// that also records its result as the key's recovery point, fenced by the
// run's lease token, so its writes commit exactly once; an outside step
// ([Step].Outside) runs between transactions with [StepState].Key, derived
// from the request key and the step name ([StepKey]), to hand to the
// outside system as its idempotency key, and its result is recorded before
// the next step. A later step reads an earlier one's result with
// [StepState.Result]. A run that stops (a crash, a cancelled context, a
// lost connection, a step's error) leaves the key leased with its recovery
// point: once the lease lapses, a retry with the same key resumes after
// the last recovery point, and [Store.CompleteEvery] (or one round of it,
// [Store.CompleteStuck]) finishes it for a caller that went away, or gives
// it up after a number of attempts ([ErrOperationFailed]). The last step's
// result is recorded as the response and replayed, byte for byte.
//
// # Inspecting and forgetting a key
//
// [Store.Inspect] reads one key of the Store's (its [KeyState]: done,
// leased, lapsed or expired; when it was claimed and expires; a lease's
// deadline; whether a fingerprint and a response are recorded and their
// sizes), to answer "why did my retry get the old answer?".
// [Store.Forget] deletes it, so that the next request with the key runs
// the work again; a lease that still holds is refused
// (sqlonce.ErrInProgress) unless [ForgetLeased] says so. Neither reaches
// a key of another scope, nor the keys httpidem and inbox keep in
// namespaces of their own. The sqlonce command does the same from a
// shell: sqlonce keys get, forget and list (--state leased for stuck
// leases, --json for scripts).
//
// # Choosing a mode
//
// Use [Store.Run], or [Store.Do] inside a transaction of yours, whenever
// the work is writes to the database that holds the keys: the key and the
// work commit or roll back together, so there is no moment when one exists
// without the other and nothing to clean up after a crash: exactly once. A
// duplicate waits for the first transaction, or gets ErrInProgress at once
// with WithNoWait. Run is faster; Do composes with other writes of yours
// in one transaction.
//
// Use a lease ([Store.Claim], then [Store.Complete] or [Store.Release]) when
// the work has effects outside the database (a payment provider, mail) or
// runs too long to keep a transaction open: at most one holder at a time, a
// crashed holder's lease lapses at its deadline and the next claimer runs
// the work again, and fencing tokens make a late holder's Complete fail
// with ErrLeaseLost. The outside work is then at least once: pass the key
// or [Lease].Token on to the outside system so that a repeated call is
// harmless there.
//
// # Observing
//
// A Store built on a driver from sqlonce.Observe reports one
// sqlonce.Event per call (Do, DoResponse, DoJSON, Run, RunJSON, Claim,
// Complete, Release, Extend, their Tx forms, Purge, Inspect, Forget; a
// key Inspect or Forget did not find is reported done): the outcome
// (first_run, replayed, already_done, in_progress, key_reuse, lease_lost,
// error), the attempts of a transaction of its own and the cause of the
// last retry, the time spent deciding the key (Event.Wait) and in fn
// (Event.Work), and the response size. The key is never in it.
//
// # Isolation levels
//
// Run's transaction is READ COMMITTED on PostgreSQL and the server's
// default on MySQL/MariaDB. Do is correct under READ COMMITTED, REPEATABLE
// READ and SERIALIZABLE on
// PostgreSQL and MySQL/MariaDB. Under PostgreSQL REPEATABLE READ or
// SERIALIZABLE a duplicate whose first run committed after the transaction's
// snapshot cannot be read, and the server reports a serialization failure;
// MySQL may report a deadlock when several transactions race for one key.
// [github.com/sqlonce/sqlonce.IsRetryable] is true for both: roll back and
// run the transaction again, and the retry sees AlreadyDone.
//
// # Sharding
//
// The sqlonce_keys table must live in the same database as the rows the
// work writes, or one transaction cannot cover both.
package dedupe
