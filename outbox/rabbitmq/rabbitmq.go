package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
)

// KeyHeader is the header that carries a message's ordering key (m.Key)
// unless WithKeyHeader names another. It is left out for an empty key.
const KeyHeader = "Sqlonce-Key"

// DefaultMaxChannels is how many publishes wait for their confirms at once
// unless WithMaxChannels says otherwise.
const DefaultMaxChannels = 32

// DefaultTimeout bounds a Publish whose context has no deadline, unless
// WithTimeout says otherwise.
const DefaultTimeout = 30 * time.Second

var (
	// ErrUnroutable is returned, wrapped with the broker's reply, when the
	// broker returned a message because no queue is bound to its routing
	// key on the exchange (a mandatory publish).
	ErrUnroutable = errors.New("rabbitmq: message unroutable")
	// ErrNacked is returned, wrapped, when the broker answered a publish
	// with a negative confirm (basic.nack): it did not take the message.
	ErrNacked = errors.New("rabbitmq: message nacked by the broker")
	// ErrClosed is returned by Publish once Close was called.
	ErrClosed = errors.New("rabbitmq: publisher closed")
)

// Publisher publishes outbox messages to RabbitMQ with publisher confirms.
// It is safe for concurrent use: each Publish holds a confirm channel of
// its own until its confirm arrives (at most WithMaxChannels at once, the
// others wait), so that a confirm and a return are always its own
// message's. It owns one connection, opened at the first Publish and
// opened again by the first Publish after it was lost (a broker restarted,
// a network cut); the publishes that were waiting when it was lost fail.
type Publisher struct {
	url       string
	cfg       amqp.Config
	userDial  bool
	exchange  string
	keyHeader string
	timeout   time.Duration

	slots chan struct{} // a token per publish in flight
	dial  chan struct{} // held while dialing

	mu     sync.Mutex
	cur    *session
	closed bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// session is a connection and its idle confirm channels.
type session struct {
	conn *amqp.Connection
	idle chan *confirmChannel
}

// confirmChannel is a channel in confirm mode with its return and close
// notifications. One Publish at a time uses it.
type confirmChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// Option configures a Publisher.
type Option func(*options) error

type options struct {
	cfg         *amqp.Config
	exchange    string
	keyHeader   string
	maxChannels int
	timeout     time.Duration
}

// WithExchange publishes to the exchange named name ("" otherwise: the
// default exchange, which routes a message to the queue named by its
// routing key). The exchange must exist when a message is published:
// publishing to a missing one fails (404 NOT_FOUND). A name longer than
// 255 bytes is sqlonce.ErrInvalidArgument.
func WithExchange(name string) Option {
	return func(o *options) error {
		if len(name) > 255 {
			return fmt.Errorf("%w: rabbitmq: WithExchange: name of %d bytes (at most 255)", sqlonce.ErrInvalidArgument, len(name))
		}
		o.exchange = name
		return nil
	}
}

// WithKeyHeader names the header that carries a message's ordering key
// (KeyHeader otherwise): 1 to 255 bytes, or sqlonce.ErrInvalidArgument.
func WithKeyHeader(name string) Option {
	return func(o *options) error {
		if name == "" || len(name) > 255 {
			return fmt.Errorf("%w: rabbitmq: WithKeyHeader: name of %d bytes (1 to 255)", sqlonce.ErrInvalidArgument, len(name))
		}
		o.keyHeader = name
		return nil
	}
}

// WithConfig sets the connection's configuration (TLS, SASL, heartbeat,
// vhost, dialer): amqp.DialConfig(url, cfg); the client's defaults fill
// what it leaves zero. Unless cfg.Dial is set, dialing is bounded by the
// Publish's context (30 s at most). A cfg with Recovery set is sqlonce.ErrInvalidArgument: the Publisher
// reconnects by itself, and a channel recovered under it would confirm
// messages it never waited for.
func WithConfig(cfg amqp.Config) Option {
	return func(o *options) error {
		if cfg.Recovery != nil {
			return fmt.Errorf("%w: rabbitmq: WithConfig: Recovery must be nil (the Publisher reconnects by itself)", sqlonce.ErrInvalidArgument)
		}
		o.cfg = &cfg
		return nil
	}
}

// WithMaxChannels sets how many publishes may wait for their confirms at
// once, each on a confirm channel of its own (DefaultMaxChannels
// otherwise); further publishes wait for one to finish. It must be 1 to
// 2047 (RabbitMQ's default channel_max); otherwise New returns
// sqlonce.ErrInvalidArgument.
func WithMaxChannels(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 2047 {
			return fmt.Errorf("%w: rabbitmq: WithMaxChannels(%d): not within 1 to 2047", sqlonce.ErrInvalidArgument, n)
		}
		o.maxChannels = n
		return nil
	}
}

// WithTimeout bounds a Publish whose context has no deadline
// (DefaultTimeout otherwise); it must be positive, or New returns
// sqlonce.ErrInvalidArgument.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: rabbitmq: WithTimeout(%v): not positive", sqlonce.ErrInvalidArgument, d)
		}
		o.timeout = d
		return nil
	}
}

// New returns a Publisher to the broker at url ("amqp://guest:guest@127.0.0.1:5672/").
// It connects at the first Publish, not here, so that a broker that is
// down does not keep a relay from starting. It returns
// sqlonce.ErrInvalidArgument for a url amqp.ParseURI refuses or an invalid
// option. Close closes its connection.
func New(url string, opts ...Option) (*Publisher, error) {
	if _, err := amqp.ParseURI(url); err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: url: %v", sqlonce.ErrInvalidArgument, err)
	}
	o := options{keyHeader: KeyHeader, maxChannels: DefaultMaxChannels, timeout: DefaultTimeout}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: rabbitmq: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	p := &Publisher{
		url:       url,
		exchange:  o.exchange,
		keyHeader: o.keyHeader,
		timeout:   o.timeout,
		slots:     make(chan struct{}, o.maxChannels),
		dial:      make(chan struct{}, 1),
	}
	if o.cfg != nil {
		p.cfg = *o.cfg
		p.userDial = p.cfg.Dial != nil
	}
	return p, nil
}

// Publish publishes m persistently and mandatorily to the exchange, with
// m.Topic as its routing key, m.ID as its message id, m.Headers as its
// headers and the key header set to m.Key (when not empty), and returns
// nil once the broker confirmed it (basic.ack).
//
// It returns ErrUnroutable when the broker returned the message (no queue
// bound to the routing key), ErrNacked for a negative confirm, the
// channel's error when the broker closed the channel (a missing exchange:
// 404 NOT_FOUND), the connection's when it is lost, ctx's error,
// ErrClosed after Close: the relay retries all of them, with its
// backoff. Before sending anything, it returns an error matching
// sqlonce.ErrInvalidArgument and outbox.ErrPermanent for an empty m.ID or
// a m.Topic over 255 bytes: no retry can send that message, and the relay
// parks it at once. Without a deadline
// in ctx, the wait is bounded by WithTimeout. After an error the message
// may still have reached a queue: RabbitMQ does not dedupe, so a consumer
// applies each message once with package inbox, by m.ID (the delivery's
// MessageId).
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if m.ID == "" {
		return invalid("rabbitmq: message without an ID")
	}
	if len(m.Topic) > 255 {
		return invalid("rabbitmq: message %q: routing key of %d bytes (at most 255)", m.ID, len(m.Topic))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	msg := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Body:         m.Payload,
	}
	if len(m.Headers) > 0 || m.Key != "" {
		msg.Headers = make(amqp.Table, len(m.Headers)+1)
		for k, v := range m.Headers {
			msg.Headers[k] = v
		}
		if m.Key != "" {
			msg.Headers[p.keyHeader] = m.Key
		}
	}

	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: publish %q: waiting for a channel: %w", m.ID, ctx.Err())
	}
	defer func() { <-p.slots }()

	s, err := p.session(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %q: %w", m.ID, err)
	}
	cc, err := s.channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %q: opening a channel: %w", m.ID, err)
	}
	dc, err := cc.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, m.Topic, true, false, msg)
	if err != nil {
		cc.discard()
		return fmt.Errorf("rabbitmq: publish %q to %q/%q: %w", m.ID, p.exchange, m.Topic, err)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		// Its confirm, or its return, would come to the next publish on
		// this channel: the channel goes.
		cc.discard()
		return fmt.Errorf("rabbitmq: publish %q to %q/%q: waiting for the confirm: %w", m.ID, p.exchange, m.Topic, ctx.Err())
	}
	if !dc.Acked() {
		// A closed channel (or connection) closes its pending confirms as
		// nacks; its error came first.
		select {
		case e, ok := <-cc.closes:
			cc.discard()
			if ok && e != nil {
				return fmt.Errorf("rabbitmq: publish %q to %q/%q: channel closed: %w", m.ID, p.exchange, m.Topic, e)
			}
			return fmt.Errorf("rabbitmq: publish %q to %q/%q: channel closed: %w", m.ID, p.exchange, m.Topic, amqp.ErrClosed)
		default:
		}
		s.put(cc)
		return fmt.Errorf("rabbitmq: publish %q to %q/%q: %w", m.ID, p.exchange, m.Topic, ErrNacked)
	}
	// The broker sends basic.return before the basic.ack of an unroutable
	// mandatory message, and the client hands both over in that order.
	select {
	case r, ok := <-cc.returns:
		if !ok {
			// The channel closed after the ack, with no return before
			// it: the message is confirmed.
			cc.discard()
			return nil
		}
		s.put(cc)
		return fmt.Errorf("%w: %q to exchange %q, routing key %q: %d %s", ErrUnroutable, m.ID, p.exchange, m.Topic, r.ReplyCode, r.ReplyText)
	default:
	}
	s.put(cc)
	return nil
}

// invalid is the error of a message Publish refuses before sending it:
// sqlonce.ErrInvalidArgument, and outbox.Permanent, since publishing it
// again cannot succeed: the relay parks it at once.
func invalid(format string, args ...any) error {
	return outbox.Permanent(fmt.Errorf("%w: %s", sqlonce.ErrInvalidArgument, fmt.Sprintf(format, args...)))
}

// Close closes the connection; Publish then returns ErrClosed, and the
// publishes waiting for their confirms fail. It is safe to call more than
// once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.cur != nil {
		err := p.cur.conn.Close()
		p.cur = nil
		if err != nil && !errors.Is(err, amqp.ErrClosed) {
			return err
		}
	}
	return nil
}

// session returns the open connection, dialing one when there is none or
// it was lost. One caller dials at a time; the others wait for it.
func (p *Publisher) session(ctx context.Context) (*session, error) {
	if s, err := p.current(); s != nil || err != nil {
		return s, err
	}
	select {
	case p.dial <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the connection: %w", ctx.Err())
	}
	defer func() { <-p.dial }()
	if s, err := p.current(); s != nil || err != nil {
		return s, err
	}
	cfg := p.cfg
	if !p.userDial {
		timeout := 30 * time.Second
		if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
			timeout = max(time.Until(d), time.Millisecond)
		}
		cfg.Dial = amqp.DefaultDial(timeout)
	}
	conn, err := amqp.DialConfig(p.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	s := &session{conn: conn, idle: make(chan *confirmChannel, cap(p.slots))}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = conn.Close()
		return nil, ErrClosed
	}
	p.cur = s
	return s, nil
}

// current returns the session if its connection is open, nil if it must
// be dialed, ErrClosed after Close.
func (p *Publisher) current() (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cur != nil && !p.cur.conn.IsClosed() {
		return p.cur, nil
	}
	return nil, nil
}

// channel returns an idle confirm channel of the session's, or opens one.
func (s *session) channel() (*confirmChannel, error) {
	for {
		var cc *confirmChannel
		select {
		case cc = <-s.idle:
		default:
		}
		if cc == nil {
			break
		}
		if !cc.ch.IsClosed() {
			return cc, nil
		}
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	// One publish at a time on a channel: a buffer of one return and one
	// close error never blocks the client's reader.
	return &confirmChannel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// put keeps cc for the next publish.
func (s *session) put(cc *confirmChannel) {
	select {
	case s.idle <- cc:
	default:
		cc.discard()
	}
}

// discard closes the channel without waiting for the broker's answer.
func (cc *confirmChannel) discard() {
	go func() { _ = cc.ch.Close() }()
}
