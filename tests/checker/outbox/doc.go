// Package outbox is the checker's outbox workload: the proof that the
// transactional outbox (package outbox) paired with the inbox (package
// inbox) makes each committed message's effect happen once, across a
// broker, whatever is killed on the way.
//
// # The run
//
// Producers run business transactions: an order row (the business table,
// orders: code = the message id, customer = the ordering key, amount = the
// key's sequence number) and outbox.Store.Enqueue of the message that
// announces it, in one transaction. A share of them is rolled back on
// purpose. Each key is written by one producer at a time, so that its
// messages are enqueued in the order of their sequence numbers. The
// producers write through a tests/internal/faultproxy that cuts a COMMIT
// now and then: the reply lost (the server committed) or the COMMIT lost
// (it rolled back). The producer cannot tell which: it reads the business
// table to learn whether its transaction, and so its message, exists.
//
// Relays run as processes of their own (the test binary started again,
// TestRelayChild, with the environment RelayMain reads), several at once
// on the same outbox, publishing through outbox/natsjs or outbox/rabbitmq;
// they are killed with SIGKILL and started again during the run. The
// broker, a child process of the run's own (tests/internal/brokers), is
// killed with SIGKILL, left down long enough for publishes to fail, and
// started again on its data: NATS JetStream (a file stream whose duplicate
// window is at its shortest, so that republished messages reach the
// consumer) or RabbitMQ (a durable exchange and queue, persistent
// messages, publisher confirms).
//
// The consumer reads the broker in order, one unacked message at a time,
// and applies each delivery with inbox.HandleTx and a row of the effects
// table (outbox_ck_effects: key, n, message id, seq; n numbers a key's
// effects in the order they were applied) in one transaction, retried
// until it commits, then acks. Twice in a run it acts as a consumer that
// died between its commit and its ack: the broker delivers the message
// again, and the inbox must drop it.
//
// # The checks
//
// When the producers are done the run waits for the outbox to drain, then
// checks from the database (the business table is the truth of what
// committed; verify.go):
//   - every committed message was applied exactly once (one effect row per
//     message id) and so delivered at least once;
//   - no message of a rolled-back transaction was delivered or applied,
//     and the outbox does not hold it;
//   - per key, the applied sequence numbers are the committed ones,
//     ascending, with no gap;
//   - the outbox holds no pending or parked message, and every committed
//     message is sent;
//   - every failed COMMIT was read back as what the table says.
//
// Each configuration (TestPostgres, TestPostgresRabbitMQ, TestMySQL,
// TestSQLite, TestPgBouncer, TestGalera; they run in parallel) logs its
// counts: transactions committed and rolled back, COMMITs cut, relay
// kills, broker restarts, publishes that failed, messages in the stream,
// deliveries and duplicates the inbox dropped. Two tests show that the
// checks can fail: producers that publish in their transaction instead of
// enqueueing are caught delivering rolled-back messages
// (TestDualWriteIsCaught), and a consumer without the inbox is caught
// applying a redelivered message twice, out of order
// (TestWithoutInboxIsCaught).
//
//	go test -race -count=1 ./checker/outbox/ -v
//	go test -count=1 ./checker/outbox/ -run TestPostgres -v -outbox.messages=2000
//
// Without nats-server (rabbitmq-server for TestPostgresRabbitMQ) the
// tests skip, naming it (CI=true: they fail); TestGalera needs root,
// galera-4 and rsync, and TestPgBouncer pgbouncer, as their packages say.
// -short leaves those three out and runs the others at a third of their
// length.
package outbox
