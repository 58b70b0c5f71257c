// Package httpidem is net/http middleware for the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header): a client that
// retries a POST or PATCH with the same key gets the first answer back,
// byte for byte, and the work is done once. Keys, fingerprints and
// recorded responses live in the database, in sqlonce's dedupe table.
//
//	drv, err := pgxdriver.New(pool)
//	...
//	m, err := httpidem.New(drv, func(r *http.Request) string {
//		return userID(r) // the authenticated caller
//	})
//	...
//	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(pay)))
//
//	func pay(w http.ResponseWriter, r *http.Request) {
//		tx, ok := httpidem.TxFrom[pgx.Tx](r.Context())
//		if !ok { // not served by the middleware's transactional mode
//			http.Error(w, "no transaction", http.StatusInternalServerError)
//			return
//		}
//		// Writes through tx commit together with the key and the answer.
//		if _, err := tx.Exec(r.Context(), "INSERT ..."); err != nil {
//			httpidem.Fail(r.Context(), err) // roll back; run again if retryable
//			http.Error(w, "payment failed", http.StatusInternalServerError)
//			return
//		}
//		...
//	}
//
// Wrap has the type routers take for middleware, so it fits ServeMux and
// any router with a Use(func(http.Handler) http.Handler) method; the
// library depends on net/http alone.
// Routers whose handlers return errors instead of writing them (echo)
// must write the error inside the wrapped handler, or httpidem records
// the empty answer the handler left; gin's handlers write through a
// gin.ResponseWriter of their own. The repository's tests/routers holds
// tested recipes for chi, echo and gin, route names included
// ([WithRoute]).
//
// # What the draft asks, and what the middleware does
//
//   - The field is an Item Structured Field whose value is a String
//     (section 2.1): Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324".
//     The key is the string's value, parsed as RFC 9651 says (escapes,
//     parameters ignored). The draft expired without becoming an RFC and
//     most clients (Stripe's among them) send the key bare:
//     Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324 is accepted
//     too, as it is, when it is visible ASCII without double quotes,
//     commas, semicolons or white space and does not start with '?' or
//     ':' (what an RFC 9651 parser, a proxy's say, would read as
//     parameters, a Boolean or a Byte Sequence: such keys must be
//     quoted), and it is the same key as its quoted form,
//     so that k and "k" replay each other; [WithStrictKey] takes the
//     String only. Any other value, an empty one or one longer than 255
//     bytes (sqlonce.MaxKeyLen, counted after unescaping), or more than
//     one field, is answered 400 with code [CodeKeyInvalid].
//   - A request that must carry a key and has none is answered 400
//     ([CodeKeyMissing], section 2.7). Which methods are handled ([WithMethods], POST
//     and PATCH by default) and which requests must carry a key
//     ([WithRequired]) is configurable.
//   - A key is unique per caller (section 5's composite key): the
//     principal function names the caller, so that one client can neither
//     trigger nor read another's replay.
//   - The request fingerprint (section 2.4) is a SHA-256 hash of the
//     method, the route ([WithRoute]), the path, query and body, and of
//     the header fields named with [WithFingerprintHeaders];
//     [WithFingerprint] puts a function of the application's in place of
//     path, query and body ([FingerprintJSON]: canonical JSON, so that key
//     order and white space do not count). The same key with a different
//     fingerprint, including the same key sent to another method or
//     route, is answered 422 ([CodeKeyReused], section 2.7): a key names
//     one request.
//   - A repeat after the first request completed gets its recorded answer
//     (section 2.6): status, the header fields named with
//     [WithResponseHeaders] and the body, byte for byte, marked with
//     [ReplayHeader]; [WithReplayHook] lets the application see and adjust
//     a replay. [WithRecord] says which answers are recorded:
//     [RecordAll] (the default: "success or an error") or [RecordSuccess].
//     An answer that is not recorded leaves the key free for a retry.
//     Under RecordAll, in transactional mode, a 4xx or 5xx answer is
//     recorded and the handler's writes commit with it: a handler that
//     must undo its writes on an error calls [Fail], or the middleware
//     is built with RecordSuccess.
//   - A repeat while the first request is still running is answered 409
//     ([CodeInProgress], section 2.7) at once, with Retry-After; with [WithWait] it is
//     held, for a bounded time, until the first request ends and then
//     gets its answer, or runs itself when that answer was not recorded
//     (409 only past the bound). Keep the bound below the server's and
//     the client's request timeouts.
//   - For an API whose clients already follow another convention,
//     [WithKeyHeader] reads the key from another field (the legacy
//     X-Idempotency-Key, say; problems then name that field), and
//     [WithKeyReuseStatus] answers a reused key 409 or 400 instead of
//     422, still with [CodeKeyReused] (a 409 for a reuse carries no
//     Retry-After; that of [CodeInProgress] does).
//   - Keys expire after [WithTTL] (24 hours by default; section 2.3 asks
//     that the policy be published); [Middleware.Purge] deletes expired ones.
//   - Errors are RFC 9457 problem details, application/problem+json, with
//     type, title, status, detail and a "code" extension ([Problem]).
//     [WithDocs] points their type, and a Link header with
//     rel="describedby", at the documentation the draft asks for.
//   - Beyond the draft: when the connection to the database is lost
//     while the request's transaction commits, the work may or may not
//     be done; the answer is 500 with [CodeOutcomeUnknown], and a retry
//     with the same key replays or runs it. An error the database
//     answers for the transaction (it rolled back) is 500 with
//     [CodeInternal], nothing recorded ([NewWithTxFunc] says what its
//     transactions are answered). An answer too large to record
//     is 500 with [CodeResponseTooLarge] (see Limits). A database that
//     refuses writes (sqlonce.ErrReadOnly: a standby, a read-only
//     replica, a primary a failover is demoting) is 503 with
//     [CodeUnavailable] and Retry-After: not carried out, and a retry
//     with the same key runs it once the application reaches a primary.
//     A claim the database refuses for the way it is set up (the keys
//     on a sharded Vitess keyspace, where a claim that does not wait for
//     a held key cannot be bounded) is 500 with [CodeInternal] in every
//     mode, its detail saying that the request was not carried out, that
//     sending it again will not succeed, and that the keys need an
//     unsharded keyspace; the error reported to [WithErrorLog] names
//     the fix. The middleware cannot know it before its first request.
//
// # Modes
//
// The constructor chooses the mode: [New] and [NewWithTxFunc] build a
// Middleware in transactional mode, for handlers whose work is in the
// database; [NewLeased] one in lease mode, for handlers whose work leaves
// it. The options are the same in both.
//
// # Transactional mode
//
// The middleware opens a transaction on the driver's database handle
// ([New]) or with the caller's [TxFunc] ([NewWithTxFunc]), claims the key
// in it, runs the handler with the transaction in the request's context
// ([TxFrom]), records the answer in the same transaction and commits,
// then sends the answer. The
// handler's writes, the key and the recorded answer commit together or
// not at all: a crash at any point leaves either everything or nothing,
// so the work is done exactly once, and the client never sees an answer
// for work that rolled back. A client that disconnects cancels the
// request's context and so rolls the work back; its retry runs it again.
// A handler that meets a database error reports it with [Fail] before
// answering: the transaction then rolls back and nothing is recorded, and
// when the database asks for a retry (deadlock, serialization failure)
// the middleware runs the handler again in a new transaction. The handler
// may thus run more than once for one request: keep effects outside the
// database out of this mode. On SQLite, which runs one writing
// transaction at a time, a duplicate waits at BEGIN for the first
// request's transaction and then gets the replay rather than 409; lease
// mode answers 409 there too.
//
// A duplicate that [WithWait] holds waits on the key's row lock, holding
// a connection; on MySQL and MariaDB the wait counts in whole seconds,
// rounded down, as dedupe.WithLockWait says (under one second it does
// not wait). An answer larger than [WithMaxResponseSize] rolls the
// handler's work back and leaves the key free.
//
// [New] runs each request on its Store's Run (dedupe.Store.Run), which
// begins the transaction in the fewest round trips the driver has:
// through pgx (a *pgxpool.Pool or a *pgx.Conn) BEGIN travels with the
// claim and the recorded answer with COMMIT, so a request costs the round
// trips of the handler's own transaction, and a replay two
// (docs/benchmarks.md).
//
// # Lease mode
//
// [NewLeased] is for handlers whose work leaves the database: charging a
// card through a provider, sending mail. The key is claimed with a lease
// in a short transaction of its own and committed before the handler runs
// ([LeaseFrom] gives it the lease and its fencing token); the recorded
// answer completes the lease, an unrecorded one releases it. A duplicate
// is answered 409 while the lease holds; one that [WithWait] holds asks
// again at growing intervals, up to 200ms, holding no connection. A
// holder that crashes leaves the lease to lapse, and a retry then runs
// the handler again: pass the key or the token on to the outside system,
// so that the repeat is harmless there, and choose the lease longer than
// the handler's own time limit. The handler's context ends when the
// client goes away, and whatever the handler then answers is recorded
// like any answer: detach work that must run to its end
// (context.WithoutCancel). An answer larger than [WithMaxResponseSize]
// is answered, and recorded, as a 500 with [CodeResponseTooLarge]: the
// work is done, and a retry must not run it again. A request without a
// key that [WithRequired] lets go passes straight through.
//
// # Requests run as steps
//
// [Middleware.Steps] is a handler that runs each request as an operation
// of several steps (dedupe.Operation): reserve the stock in the database,
// charge the card through a provider, write the order, send the receipt.
// Each database step commits once, with a recovery point on the key's
// row; each outside step gets a key of its own (dedupe.StepState.Key) to
// hand to the outside system. A request stopped part-way (a crash, a
// client gone, a step's error, answered 500 with [CodeOutcomeUnknown])
// is resumed after its last recovery point by a retry with the same key,
// or by [Middleware.ResumeEvery] when its client never comes back.
//
//	mux.Handle("POST /checkout", m.Steps(checkout))
//	go m.ResumeEvery(ctx, time.Minute, 5, checkout)
//
// The steps read the request with [RequestOf] (they may run in the
// resumer, after the request ended), and the last one returns its
// answer built with [Respond]: recorded and replayed byte for byte as a
// handler's answer is, with the problems above for everything else.
//
// # Forms without a key
//
// [WithNoRepeatSubmit] guards requests that carry no key, such as HTML
// form posts: the key is derived from the caller, the route and the
// request fingerprint, and lives for a short window. A double click runs
// once and the second click gets the first answer (409 while the first
// runs); a different body is a different submit, and after the window
// the same submit runs again. A request that carries a key is handled by
// its key.
//
// # Observing
//
// A Middleware built on a driver from sqlonce.Observe reports one
// sqlonce.Event per request that carries a key (operation "Serve", the
// scope of the key), with the status code answered in Event.HTTPStatus:
// first_run, replayed, in_progress (409), key_reuse (422) or error, the
// handler's time in Event.Work and the transaction's attempts. Its own
// dedupe.Store does not report the request again.
//
// # Limits
//
// The request body is read (up to [WithMaxBody], 413 above it, before
// the handler runs) to fingerprint it; the handler reads a copy. The
// answer is buffered until recorded: no streaming, no http.Flusher. An
// answer whose body is larger than [WithMaxResponseSize] cannot be
// recorded: the client gets a 500 problem with code
// [CodeResponseTooLarge] instead, and in transactional mode the
// handler's work rolls back and the key stays free. Recorded header
// fields do not count against that limit; each is bounded (at most 65,535
// values, names up to 65,535 bytes), and an answer whose record would
// exceed dedupe.MaxResponseSize in all is refused the same way. Go's own
// http.Transport resends a request that carries an Idempotency-Key by
// itself when a kept-alive connection breaks before the answer: the
// middleware makes that safe.
package httpidem
