// Package natsjs is an outbox.Publisher for NATS JetStream: a relay of
// package outbox hands it each committed message, and Publish returns nil
// only once JetStream has acknowledged storing it in a stream.
//
// Each message is published to the subject m.Topic (behind the prefix
// WithSubjectPrefix sets), with m.Payload as its data, m.Headers as its
// headers, m.Key in the header KeyHeader (WithKeyHeader names another) and
// m.ID as its Nats-Msg-Id. JetStream drops a message whose id it has seen
// within the stream's duplicate window (Duplicates in the stream's
// configuration, 2 minutes by default), so a republish after a lost ack
// or a relay's crash is stored once; its ack says Duplicate, which Publish
// takes as success. Set the window longer than a relay takes to publish a
// message again (its lease and backoff), or count on package inbox at the
// consumer, which applies each message once whatever the broker delivers.
//
// The subject must belong to a stream: with none, JetStream does not
// answer and Publish returns an error wrapping jetstream.ErrNoStreamResponse.
// The relay retries that error, with its backoff, and parks the message
// only after its last attempt: a stream that exists but has no leader for
// the moment (a cluster electing one, a server restarting) answers the
// same, and so does a stream created a little later. A message Publish
// refuses before sending it (an invalid subject or header, see Publish)
// cannot be sent by any retry: that error matches outbox.ErrPermanent as
// well as sqlonce.ErrInvalidArgument, and the relay parks the message at
// once.
//
// The package is a module of its own (github.com/sqlonce/sqlonce/outbox/natsjs),
// so that the library links no broker client.
package natsjs
