// Package outbox is the transactional outbox: Enqueue adds a message in
// the caller's own transaction, so that it exists exactly when the
// business write beside it committed, and a relay publishes it to a
// broker afterwards, at least once, in order per key. Paired with package
// inbox on the consumer's side, each message's effect happens once.
package outbox
