// Package token issues one-time tokens and consumes each one exactly once,
// in the caller's database transaction.
//
// The pattern: the server hands a token to the client before the operation
// (rendered into a form, returned by a "prepare" call), and the client
// sends it back with the request that does the work. The first request to
// consume the token runs the work; every other one, concurrent or later,
// is recognised and turned away.
//
//	drv, err := pgxdriver.New(pool)
//	...
//	s, err := token.New(drv)
//	...
//	tok, err := s.Issue(ctx, "checkout:"+sessionID) // into the form
//	...
//	// When the form comes back:
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		res, err := s.Consume(ctx, tx, "checkout:"+sessionID, r.FormValue("token"))
//		if err != nil || res.AlreadyDone() {
//			return err // ErrUnknown, ErrExpired, ErrOtherScope, or a double submit
//		}
//		_, err = tx.Exec(ctx, "INSERT INTO orders ...")
//		return err
//	})
//
// # Why in the database
//
// The usual answer keeps the token in Redis and deletes it with a
// get-compare-delete script. The deletion and the business write then
// live in two systems with no common transaction: delete first and a crash
// before the write loses the request (every retry is refused), delete
// after and a crash in between runs it twice. Here [Store.Consume] is one
// conditional UPDATE in the transaction that does the work: it commits or
// rolls back with the work, so a crash can neither lose the request nor
// run it twice, and the row lock decides between concurrent submits, never
// a prior read.
//
// # Outcomes
//
// Consume answers FirstRun to the one transaction that consumes the token
// and AlreadyDone to a repeat of the same token in the same scope until it
// expires (consumed tokens are kept until then for this). An unknown
// token, an expired one and a token issued for another scope are distinct
// errors: [ErrUnknown], [ErrExpired], [ErrOtherScope]. A token records no
// answer: when a repeat must get the first run's response back, run
// [github.com/sqlonce/sqlonce/dedupe] in the same transaction with the
// token as the key.
//
// # Secrecy
//
// A token is 256 bits from crypto/rand, [Len] characters of base64url.
// Only its SHA-256 hash is stored, so a copy of the table (a backup, a
// replica) yields no token anyone could submit, and errors never include
// the token. Scopes are not secret.
//
// # Expiry and purge
//
// Tokens live for [DefaultTTL] unless [WithTTL] says otherwise, counted
// by the database's clock. [Store.Purge] deletes expired tokens, consumed
// or not, in short batches; run it from a periodic job.
package token
