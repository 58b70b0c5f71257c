package natsjs

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
)

// KeyHeader is the header that carries a message's ordering key (m.Key)
// unless WithKeyHeader names another. It is left out for an empty key.
const KeyHeader = "Sqlonce-Key"

// Publisher publishes outbox messages to JetStream and waits for each
// publish ack. It is safe for concurrent use; it shares the JetStream
// context (and its NATS connection, which reconnects by itself) it was
// built with.
type Publisher struct {
	js        jetstream.JetStream
	prefix    string
	keyHeader string
}

var _ outbox.Publisher = (*Publisher)(nil)

// Option configures a Publisher.
type Option func(*options) error

type options struct {
	prefix    string
	keyHeader string
}

// WithSubjectPrefix publishes each message to prefix+m.Topic instead of
// m.Topic ("orders." and the topic "placed" make "orders.placed"). The
// prefix must not hold whitespace or a wildcard token ("*", ">"), nor an
// empty token but a last one (a trailing dot); otherwise New returns
// sqlonce.ErrInvalidArgument.
func WithSubjectPrefix(prefix string) Option {
	return func(o *options) error {
		if prefix == "" {
			return fmt.Errorf("%w: natsjs: WithSubjectPrefix is empty", sqlonce.ErrInvalidArgument)
		}
		if err := checkSubject(strings.TrimSuffix(prefix, ".")); err != nil {
			return fmt.Errorf("%w: natsjs: WithSubjectPrefix(%q): %v", sqlonce.ErrInvalidArgument, prefix, err)
		}
		o.prefix = prefix
		return nil
	}
}

// WithKeyHeader names the header that carries a message's ordering key
// (KeyHeader otherwise). It must be a valid header name (printable ASCII,
// no space or colon) and not Nats-Msg-Id; otherwise New returns
// sqlonce.ErrInvalidArgument.
func WithKeyHeader(name string) Option {
	return func(o *options) error {
		if err := checkHeaderName(name); err != nil {
			return fmt.Errorf("%w: natsjs: WithKeyHeader(%q): %v", sqlonce.ErrInvalidArgument, name, err)
		}
		if strings.EqualFold(name, jetstream.MsgIDHeader) {
			return fmt.Errorf("%w: natsjs: WithKeyHeader(%q): the message id's header", sqlonce.ErrInvalidArgument, name)
		}
		o.keyHeader = name
		return nil
	}
}

// New returns a Publisher over js, a JetStream context of the caller's
// (jetstream.New(nc)). It returns sqlonce.ErrInvalidArgument for a nil js
// or an invalid option.
func New(js jetstream.JetStream, opts ...Option) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: natsjs: nil JetStream", sqlonce.ErrInvalidArgument)
	}
	o := options{keyHeader: KeyHeader}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: natsjs: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Publisher{js: js, prefix: o.prefix, keyHeader: o.keyHeader}, nil
}

// Publish publishes m and returns nil once JetStream acknowledged it,
// stored or dropped as a duplicate of m.ID within the stream's duplicate
// window. The subject is the prefix and m.Topic; m.Headers become the
// message's headers, then the key header is set to m.Key (when not empty)
// and Nats-Msg-Id to m.ID, replacing headers of those names.
//
// It returns an error matching sqlonce.ErrInvalidArgument and
// outbox.ErrPermanent (the relay parks the message at once: publishing it
// again cannot succeed), before sending anything, for an empty m.ID, a
// subject NATS refuses (empty tokens, whitespace, wildcards) and a header
// name or value that cannot be sent as it is (a name with a colon, a
// space or a control character; a value with CR or LF); the broker's
// error otherwise, which the relay retries (among them
// jetstream.ErrNoStreamResponse when no stream holds the subject, and
// ctx's error). Without a deadline
// in ctx, the JetStream context's default timeout (5 s) bounds the wait.
// After an error the message may still have been stored: publish it again
// with the same m.ID.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if m.ID == "" {
		return invalid("natsjs: message without an ID")
	}
	subject := p.prefix + m.Topic
	if err := checkSubject(subject); err != nil {
		return invalid("natsjs: message %q: subject %q: %v", m.ID, subject, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Payload
	for k, v := range m.Headers {
		if err := checkHeaderName(k); err != nil {
			return invalid("natsjs: message %q: header %q: %v", m.ID, k, err)
		}
		if strings.ContainsAny(v, "\r\n") {
			return invalid("natsjs: message %q: header %q: the value holds CR or LF", m.ID, k)
		}
		msg.Header.Set(k, v)
	}
	if m.Key != "" {
		if strings.ContainsAny(m.Key, "\r\n") {
			return invalid("natsjs: message %q: the key holds CR or LF", m.ID)
		}
		msg.Header.Set(p.keyHeader, m.Key)
	}
	// Set by WithMsgID too; deleted first so that a header of another case
	// ("nats-msg-id") cannot ride along beside it.
	for k := range msg.Header {
		if strings.EqualFold(k, jetstream.MsgIDHeader) {
			delete(msg.Header, k)
		}
	}
	// A PubAck with Duplicate set is success: the stream holds m already.
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID)); err != nil {
		return fmt.Errorf("natsjs: publish %q to %s: %w", m.ID, subject, err)
	}
	return nil
}

// checkSubject refuses what NATS cannot publish to: an empty subject or
// token, whitespace, and the wildcard tokens.
func checkSubject(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if strings.ContainsAny(s, " \t\r\n\f\v\x00") {
		return fmt.Errorf("holds whitespace")
	}
	for _, t := range strings.Split(s, ".") {
		switch t {
		case "":
			return fmt.Errorf("has an empty token")
		case "*", ">":
			return fmt.Errorf("has the wildcard token %q", t)
		}
	}
	return nil
}

// checkHeaderName accepts printable ASCII without space or colon, what a
// NATS header line can carry as its name.
func checkHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("byte %q is not allowed in a header name", c)
		}
	}
	return nil
}

// invalid is the error of a message Publish refuses before sending it:
// sqlonce.ErrInvalidArgument, and outbox.Permanent, since publishing it
// again cannot succeed: the relay parks it at once.
func invalid(format string, args ...any) error {
	return outbox.Permanent(fmt.Errorf("%w: %s", sqlonce.ErrInvalidArgument, fmt.Sprintf(format, args...)))
}
