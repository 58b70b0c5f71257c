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
//	drv, err := pgxdriver.New(pool)
//	...
//	store, err := dedupe.New(drv)
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
// commits, in as few round trips as the driver allows (docs/benchmarks.md).
// fn may run more than once (Run starts over after a deadlock, a
// serialization failure, or a key recorded by another transaction while
// fn ran), so it does its work through tx only:
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
// [WithFavor] trades a cheaper first run for a dearer repeat, or the other
// way round, where the driver can.
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
// [DoJSON] and [RunJSON] record Go values with encoding/json, or with
// another [Codec] given by [WithCodec].
//
// # Batches
//
// [Store.DoBatch] claims many keys of one scope in the caller's
// transaction in a constant number of statements and runs fn once with
// the new ones; [Store.RunBatch] does the same in a transaction of the
// Store's own. Package [github.com/sqlonce/sqlonce/inbox] wraps them for
// message consumers.
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
// each in a short transaction, and is safe to run from several instances
// at once. [Store.PurgeEvery] runs it in the background in every instance
// of a program; the instances elect one that purges, with a fenced lease
// (no advisory lock, so it works through PgBouncer, on Galera and on
// SQLite). Every time comparison uses the database's clock, never the
// application's.
//
// # In progress
//
// By default a duplicate waits for the transaction holding the key. A
// caller that must not wait builds its Store with [WithNoWait] (or
// [WithLockWait] for a bounded wait) and gets
// [github.com/sqlonce/sqlonce.ErrInProgress] instead; its transaction stays
// usable. What the bound does per database: docs/drivers.md. The other
// way round, [WithAwaitResult] makes a repeat of Run or RunSteps whose
// work is in progress (a lease, a run of steps, the resumer) wait, bounded
// by its ctx, for the recorded answer.
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
// # Operations of several steps: RunSteps and the resumer
//
// An [Operation] is a list of named steps run under one key by
// [Store.RunSteps]: reserve the stock, charge the card, write the order.
// A database step ([Step].InTx) commits its writes with its result, fenced
// by the run's lease token; an outside step ([Step].Outside) gets a key of
// its own ([StepState].Key) to hand to the outside system. A run that
// stops leaves the key leased with its last recovery point: once the lease
// lapses, a retry with the same key resumes there, and
// [Store.ResumeEvery] finishes runs whose caller went away, or gives
// them up ([ErrOperationFailed]). The last step's result is the response,
// replayed byte for byte. A first step that is a database step commits
// with the key's claim: a process that dies in it leaves no key, and a
// duplicate waits on the key's row until that transaction ends.
//
// # Inspecting and forgetting a key
//
// [Store.Inspect] reads one key of the Store's ([KeyState]: done, leased,
// lapsed or expired, with its times and sizes), to answer "why did my
// retry get the old answer?". [Store.Forget] deletes it, so that the next
// request with the key runs the work again. Neither reaches another
// scope's keys, nor those of RunSteps: [Store.InspectSteps] reads an
// operation's key with where it stopped, or where, why and when it was
// given up ([StepsInfo]); [Store.ForgetSteps] lets the next RunSteps start
// it anew, and [Store.Redrive] lets a given-up one go on from its last
// recovery point. The inbox and httpidem have the same pair for their
// keys. The sqlonce command does the same from a shell, for every kind of
// key (sqlonce keys get, forget, list, with --kind; keys redrive).
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
// with ErrLeaseLost. The outside work is then at least once: give the
// outside system an idempotency key made from the Lease's Scope and Key
// (e.g. [StepKey]), the same for every claimer, so that a repeated call is
// harmless there. [Lease].Token grows with every claim: it fences stale
// writers and is never an idempotency key.
//
// # Observing
//
// A Store built on a driver from sqlonce.Observe reports one
// sqlonce.Event per call: the outcome, the attempts and the cause of the
// last retry, the time spent deciding the key and in fn, and the response
// size; never the key (docs/operations.md).
//
// # Isolation levels
//
// Do is correct under READ COMMITTED, REPEATABLE READ and SERIALIZABLE.
// Under the stricter levels a duplicate racing the first run may get a
// serialization failure (PostgreSQL) or a deadlock (MySQL):
// [github.com/sqlonce/sqlonce.IsRetryable] is true for both; roll back and
// run the transaction again, and the retry sees AlreadyDone. Run's own
// transaction is READ COMMITTED on PostgreSQL and the server's default on
// MySQL/MariaDB.
//
// # Concurrency
//
// A Store is safe for concurrent use by any number of goroutines and
// program instances; the database arbitrates every key.
//
// # Sharding
//
// The sqlonce_keys table must live in the same database as the rows the
// work writes, or one transaction cannot cover both.
package dedupe
