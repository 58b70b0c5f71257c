package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/keys"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/testclock"
)

// Store keeps the outbox's messages in the sqlonce_outbox table through a
// driver: Enqueue adds them in the caller's transaction, Relay publishes
// them, and Get, List, Stats, Redrive and Forget let an operator look at
// them. It is safe for concurrent use.
type Store[TTx any] struct {
	engine   driver.Engine[TTx]
	caps     driver.Capabilities[TTx]
	observer sqlonce.Observer
	noNotify bool
}

// Option configures a Store.
type Option func(*options) error

type options struct {
	noNotify bool
}

// WithoutNotify makes Enqueue add messages without waking the relays
// (PostgreSQL's NOTIFY; other engines never notify). By default, on
// PostgreSQL, an enqueued message leaves within milliseconds of its
// commit, but every transaction that notifies takes a lock of the whole
// cluster at its COMMIT and holds it until the commit is durable:
// notifying transactions commit one at a time, which caps a producer with many
// concurrent writers (docs/benchmarks.md, "Outbox"). With WithoutNotify
// nothing is serialized, and the relays find the messages at their next
// poll (WithPollInterval), or sooner when another Store's notification
// wakes them. Relays need no option: they listen and poll either way.
func WithoutNotify() Option {
	return func(o *options) error {
		o.noNotify = true
		return nil
	}
}

// New returns a Store on the given driver. It returns an error matching
// sqlonce.ErrInvalidArgument for a nil driver or one not built by its
// package's New (a zero Driver), or a nil option.
func New[TTx any](d sqlonce.Driver[TTx], opts ...Option) (*Store[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: outbox: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	var o options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	e := d.Engine()
	return &Store[TTx]{engine: e, caps: e.Capabilities(), observer: obs.Of(d), noNotify: o.noNotify}, nil
}

// Enqueue adds m to the outbox in tx, the caller's transaction, beside the
// business write it announces: the message exists once tx commits, and
// never if tx rolls back. Enqueue runs its statements in tx and never ends
// it. It returns:
//   - FirstRun: m was added;
//   - AlreadyDone: a message with m.ID and the same topic, key, payload
//     and headers is already in the outbox (a producer that retried);
//     nothing changed;
//   - an error matching sqlonce.ErrKeyReuse: m.ID holds another message;
//   - sqlonce.ErrInvalidKey for an invalid m.ID (empty, over 255 bytes,
//     not UTF-8, a NUL byte) or m.Key (the same, but empty is allowed),
//     and sqlonce.ErrInvalidArgument for a nil tx, an invalid m.Topic
//     (as m.ID) or an empty header name, before any SQL runs;
//   - an error for which sqlonce.IsRetryable is true: roll back and retry
//     the whole transaction.
//
// A message id is unique in the outbox while the message is there, until
// it is purged after the relay's retention: an id enqueued again after
// that is a new message.
func (s *Store[TTx]) Enqueue(ctx context.Context, tx TTx, m Message) (res sqlonce.Result, err error) {
	op := obs.Start(s.observer, "outbox", "Enqueue", m.Topic, m.ID)
	defer func() { err = op.End(ctx, res, err) }()
	if err := keys.CheckTx(tx); err != nil {
		return sqlonce.Result{}, err
	}
	dm, err := encode(m)
	if err != nil {
		return sqlonce.Result{}, err
	}
	dm.NoNotify = s.noNotify
	inserted, stored, err := s.engine.OutboxInsert(ctx, tx, dm, testclock.Now(ctx))
	op.Decided()
	switch {
	case err != nil:
		return sqlonce.Result{}, fmt.Errorf("sqlonce/outbox: enqueue message %q: %w", m.ID, err)
	case inserted:
		return sqlonce.Result{Outcome: sqlonce.FirstRun}, nil
	case string(stored) == string(dm.Fingerprint):
		return sqlonce.Result{Outcome: sqlonce.AlreadyDone}, nil
	}
	return sqlonce.Result{}, fmt.Errorf("%w: message id %q holds another message (topic, key, payload or headers differ)", sqlonce.ErrKeyReuse, m.ID)
}

// check validates m as Enqueue documents it.
func check(m Message) error {
	if err := keys.Check("message id", m.ID); err != nil {
		return err
	}
	if err := keys.Check("topic", m.Topic); err != nil {
		// The same rules as a key's, but a topic is no key: the error
		// says sqlonce.ErrInvalidArgument.
		return fmt.Errorf("%w: %s", sqlonce.ErrInvalidArgument, strings.TrimPrefix(err.Error(), sqlonce.ErrInvalidKey.Error()+": "))
	}
	if m.Key != "" {
		if err := keys.Check("ordering key", m.Key); err != nil {
			return err
		}
	}
	for name := range m.Headers {
		if name == "" {
			return fmt.Errorf("%w: message %q has a header with an empty name", sqlonce.ErrInvalidArgument, m.ID)
		}
	}
	return nil
}

// encode checks m and returns it as the driver stores it.
func encode(m Message) (driver.OutboxMessage, error) {
	if err := check(m); err != nil {
		return driver.OutboxMessage{}, err
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	headers := encodeHeaders(m.Headers)
	return driver.OutboxMessage{
		ID:          m.ID,
		Topic:       m.Topic,
		OrderingKey: m.Key,
		Payload:     payload,
		Headers:     headers,
		Fingerprint: fingerprint(m.Topic, m.Key, payload, headers),
	}, nil
}

// decode returns a stored message as the Publisher gets it.
func decode(dm driver.OutboxMessage) (Message, error) {
	h, err := decodeHeaders(dm.Headers)
	if err != nil {
		return Message{}, fmt.Errorf("sqlonce/outbox: message %q: %w", dm.ID, err)
	}
	return Message{ID: dm.ID, Topic: dm.Topic, Key: dm.OrderingKey, Payload: dm.Payload, Headers: h}, nil
}

// encodeHeaders encodes headers sorted by name, each name and value
// preceded by its length as a uvarint; no headers is an empty slice.
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return []byte{}
	}
	names := make([]string, 0, len(h))
	size := 0
	for k, v := range h {
		names = append(names, k)
		size += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

var errHeaders = errors.New("headers are not in encodeHeaders' encoding")

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := make(map[string]string)
	next := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	for len(b) > 0 {
		k, ok := next()
		if !ok {
			return nil, errHeaders
		}
		v, ok := next()
		if !ok {
			return nil, errHeaders
		}
		h[k] = v
	}
	return h, nil
}

// fingerprint is the SHA-256 digest of a message's topic, ordering key,
// payload and encoded headers, each preceded by its length.
func fingerprint(topic, key string, payload, headers []byte) []byte {
	d := sha256.New()
	d.Write([]byte("sqlonce/outbox v1\x00"))
	var n [binary.MaxVarintLen64]byte
	for _, part := range [][]byte{[]byte(topic), []byte(key), payload, headers} {
		d.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		d.Write(part)
	}
	return d.Sum(nil)
}

// State is where a message is in the outbox.
type State int16

// The states of a message.
const (
	// Pending: waiting to be published, or being published by a relay
	// that leased it (Info.Leased).
	Pending = State(driver.OutboxPending)
	// Sent: the broker confirmed it; purged after the relay's retention.
	Sent = State(driver.OutboxSent)
	// Parked: its publish failed MaxAttempts times, or once with a
	// permanent error. It holds back the later messages of its ordering
	// key until Redrive makes it pending again or Forget deletes it.
	Parked = State(driver.OutboxParked)
)

// String returns "pending", "sent" or "parked".
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Sent:
		return "sent"
	case Parked:
		return "parked"
	}
	return fmt.Sprintf("State(%d)", int16(s))
}

// valid reports whether s is one of the states.
func (s State) valid() bool { return s == Pending || s == Sent || s == Parked }

// errText bounds a publish error's text as last_error stores it.
func errText(err error) string {
	s := err.Error()
	const max = 1000
	if len(s) > max {
		s = s[:max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
}
