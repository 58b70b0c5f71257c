// Package rabbitmq is an outbox.Publisher for RabbitMQ (AMQP 0-9-1, with
// github.com/rabbitmq/amqp091-go): a relay of package outbox hands it each
// committed message, and Publish returns nil only once the broker has
// confirmed it (a publisher confirm, basic.ack).
//
// Each message is published to one exchange (WithExchange; the default
// exchange otherwise) with m.Topic as its routing key, persistent
// (delivery mode 2: a durable queue keeps it across a broker restart) and
// mandatory: a message no queue takes comes back, and Publish returns
// ErrUnroutable instead of reporting a message nobody will receive as
// sent. m.ID is the message's MessageId (AMQP's message-id property),
// m.Headers its headers, and m.Key rides in the header KeyHeader
// (WithKeyHeader names another).
//
// ErrUnroutable is not permanent: the relay retries it with its backoff
// and parks the message only after its last attempt, since a queue or a
// binding declared meanwhile (a consumer deployed after its producer)
// routes the message; a missing exchange (404 NOT_FOUND) and a nack are
// retried too. Only a message Publish refuses before sending it (an empty
// m.ID, a routing key over 255 bytes) is parked at once: that error
// matches outbox.ErrPermanent.
//
// RabbitMQ does not drop a message published twice, as a relay does after
// a lost confirm or a crash: the consumer applies each message once with
// package inbox, keyed by the delivery's MessageId.
//
// The Publisher owns its connection: opened at the first Publish, opened
// again by the first Publish after it was lost. Each Publish waits for its
// confirm on a channel it holds alone, so confirms and returns are never
// mistaken for another message's; WithMaxChannels bounds how many wait at
// once.
//
// The package is a module of its own (github.com/sqlonce/sqlonce/outbox/rabbitmq),
// so that the library links no broker client.
package rabbitmq
