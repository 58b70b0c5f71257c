// Package inbox makes message consumers apply each message once, whatever
// the broker redelivers.
//
// Brokers deliver at least once: a message whose ack was lost, that was
// nak'ed, whose ack wait expired while the consumer was still working, or
// that a consumer held when it restarted, comes again; producers that
// retry publish the same message twice. An [Inbox] records each applied
// message's id in the same database transaction as the message's own
// writes (key = message id, scope = consumer name, in sqlonce's dedupe
// table, in a namespace of the inbox's own: no dedupe Store call can find
// or claim a message id), and the consumer acks only after that transaction committed:
//
//	drv, err := pgxdriver.New(pool)
//	...
//	in, err := inbox.New(drv, "ledger-writer")
//	...
//	for msg := range deliveries {
//		_, err := in.Handle(ctx, msg.ID, func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "INSERT INTO ledger ...", ...)
//			return err
//		})
//		if err != nil {
//			msg.Nak() // nothing was applied: let it come again
//			continue
//		}
//		msg.Ack() // applied now, or by an earlier delivery
//	}
//
// A crash before the commit leaves neither the writes nor the id: the
// redelivery applies the message. A crash between the commit and the ack
// leaves both: the redelivery finds the id and is acked without running
// again. A redelivery that arrives while the first delivery's transaction
// is still open waits for that transaction, then acks or applies.
//
// # Batches
//
// A consumer that pulls many messages at a time applies them with
// [Inbox.HandleBatch] (or [Inbox.HandleBatchTx] in its own transaction):
// the ids of the batch are claimed together, in a constant number of
// statements, and fn gets the ids not applied before: a batch of 100
// messages costs the round trips of one transaction, not of 100. Ack the whole batch when it returns nil; on an
// error nothing of it was applied.
//
// Ids are remembered for [DefaultTTL] unless [WithTTL] says otherwise;
// [Inbox.Purge] removes the expired ones. [Inbox.HandleTx] runs in the
// caller's own transaction. Effects outside the database (an email, a
// call to another service) are not covered by the transaction: for those,
// see the lease mode of package [github.com/sqlonce/sqlonce/dedupe].
package inbox
