// Package outbox is the transactional outbox: Enqueue adds a message in
// the caller's own transaction, so that it exists exactly when the
// business write beside it committed, and a relay publishes it to a
// broker afterwards, at least once, in order per key. Paired with package
// inbox on the consumer's side, each message's effect happens once.
//
// # The contract
//
//   - A message is published only if the transaction that enqueued it
//     committed; one rolled back is never published, and one committed
//     is published, once a relay runs, however often a relay, the broker
//     or the network fails meanwhile.
//   - At least once: a message is marked sent only after the Publisher
//     returned nil (the broker confirmed it). A relay that crashes or
//     loses its connection between the broker's confirmation and the
//     mark, or a publish that overran its lease, publishes it again. The
//     message keeps its ID in every publish: the consumer's inbox
//     (inbox.Inbox.Handle with Message.ID as the message id) applies it
//     once, which makes the effect exactly once end to end; a publisher
//     also hands the ID to brokers that dedupe by it (JetStream's
//     Nats-Msg-Id).
//   - Order per key: the messages of one Message.Key reach the Publisher
//     one after the other in the order they were enqueued, the next one
//     only once the broker confirmed the one before, even with several
//     relays. Messages of different keys, and those of an empty Key, are
//     published in parallel, in no set order. A message that keeps
//     failing is parked and holds back the later messages of its key (and
//     only those) until an operator re-drives it (Redrive) or forgets it
//     (Forget). See "Order of enqueue, order of commit" below.

//   - On a failed publish the message is published again after a backoff
//     that grows with each failure (WithRetry), parked after the last
//     attempt, or at once for an error wrapped by Permanent. A relay whose
//     database fails retries at its next round; a relay that stops (its
//     context ends, the process dies) leaves its messages leased until
//     the lease lapses (WithLease), and then another relay publishes them.
//
// # Order of enqueue, order of commit
//
// The order of a key is the order of Enqueue: each message takes a
// sequence number when it is inserted, and a relay publishes the
// committed messages of a key in that order. Within one transaction that
// is the order of its Enqueue calls. Across transactions it is also the
// order in which they commit when the producers of a key serialize on a
// row of their own, the entity's row that the key names: lock it (SELECT
// ... FOR UPDATE) or update it (an order's status, its version) before
// Enqueue, as a state change does anyway. The second transaction then
// waits for the first to commit before it enqueues, and its message
// comes after the first's. (On SQLite, where one transaction writes at a
// time, the order of enqueue is always the order of commit.)
//
// When producers of one key do not serialize, two transactions that
// enqueue for the key at the same time may commit in the other order
// than they inserted, and their two messages may reach the Publisher in
// either order: in the order of insertion when both committed before a
// relay looked, but the later one first when it committed, and a relay
// published it, while the earlier one was still uncommitted (a relay
// sees only committed messages). No order is lost that the application
// had: neither transaction saw the other's write. If the consumer needs
// one, make the producers serialize on the entity's row.
//
// # Use
//
// Enqueue beside the business write, in the same transaction (pgx.Tx or
// *sql.Tx: the driver's), and commit. Run Store.Relay in a goroutine in
// each instance of the program with a Publisher for the broker (the
// adapters for NATS JetStream and RabbitMQ are modules of their own, so
// that this package links no broker library). The relays share the work
// through leases on the messages. On PostgreSQL a relay listens for the
// enqueue's notification and publishes within milliseconds of the
// commit; elsewhere, and through PgBouncer in transaction mode, it polls
// (WithPollInterval).
//
// The notification has a cost on PostgreSQL: a transaction that notifies
// holds a lock of the whole cluster through its COMMIT, so that
// notifying transactions commit one at a time. With many concurrent
// writers, a Store made with WithoutNotify enqueues without it: nothing
// is serialized, and its messages leave at the relays' next poll (up to
// WithPollInterval after the commit) instead of within milliseconds.
//
// Operators watch Stats (the backlog, the age of the oldest pending
// message, the parked messages) and mend with Get, List, Redrive and
// Forget; every operation is reported to the driver's Observer
// (sqlonce.Observe) with Strategy "outbox".
//
// The sqlonce_outbox table comes with sqlonce's migrations (package
// migrations). Sent messages are purged by the relays after WithRetention
// (a day by default); until then an id enqueued again is recognised
// (AlreadyDone).
package outbox
