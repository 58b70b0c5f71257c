package outbox

import "context"

// Message is one message of the outbox: what Enqueue stores in the
// caller's transaction and a relay hands its Publisher once that
// transaction committed.
type Message struct {
	// ID identifies the message for good: the consumer's inbox key
	// (inbox.Inbox.Handle's msgID), kept across every publish of it. 1 to
	// 255 bytes; unique in the outbox while the message is there.
	ID string
	// Topic is where the message goes: a NATS subject, a RabbitMQ routing
	// key. 1 to 255 bytes.
	Topic string
	// Key is the ordering key, at most 255 bytes: the messages of one key
	// are published one after the other, each once the broker confirmed
	// the one before, in the order they were enqueued (the order of
	// commit when the producers of a key serialize on the entity's row:
	// see the package's doc). An empty Key orders nothing.
	Key string
	// Payload is the message's body.
	Payload []byte
	// Headers go with the message as the broker's headers.
	Headers map[string]string
}

// Publisher sends messages to a broker for a relay. Publish returns nil
// only once the broker has confirmed m (a JetStream publish ack, a
// RabbitMQ publisher confirm); the relay marks m sent only then. It is
// called from several goroutines at once, for messages of different
// ordering keys. A message may be published more than once (after an
// error, a relay's crash or a lapsed lease): a publisher passes m.ID to
// the broker as its message id where the broker dedupes by it, and the
// consumer applies each message once with package inbox.
type Publisher interface {
	Publish(ctx context.Context, m Message) error
}

// PublisherFunc is a Publisher made of a function.
type PublisherFunc func(ctx context.Context, m Message) error

// Publish calls f(ctx, m).
func (f PublisherFunc) Publish(ctx context.Context, m Message) error { return f(ctx, m) }
