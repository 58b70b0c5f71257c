package dedupe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A key of an operation of several steps stores, in its response column,
// one of three encodings, told apart by their first byte: while leased,
// the recovery point; once done, the final response; once given up, the
// reason.
const (
	recoveryV1    byte = 0x01
	finalResponse byte = 0x10
	finalFailed   byte = 0x11
)

var errBadRecovery = errors.New("sqlonce/dedupe: malformed recovery point")

// recovery is an operation's recovery point: what it needs to go on from
// where it stopped.
type recovery struct {
	op       string // Operation.Name
	attempts int    // runs that held the lease, this one included
	// ttl is the Request's TTL (the Store's when it set none): the
	// resumer, which has no Request, records the response for it too,
	// so that the key lives at least as long as its first caller asked.
	ttl     time.Duration
	input   []byte
	names   []string // the steps done, in order
	results [][]byte // their results
}

func (r *recovery) encode() []byte {
	n := 1 + 6*binary.MaxVarintLen64 + len(r.op) + len(r.input)
	for i := range r.names {
		n += 2*binary.MaxVarintLen64 + len(r.names[i]) + len(r.results[i])
	}
	b := make([]byte, 0, n)
	b = append(b, recoveryV1)
	b = appendBytes(b, []byte(r.op))
	b = binary.AppendUvarint(b, uint64(r.attempts))
	b = binary.AppendUvarint(b, uint64(r.ttl.Microseconds()))
	b = appendBytes(b, r.input)
	b = binary.AppendUvarint(b, uint64(len(r.names)))
	for i := range r.names {
		b = appendBytes(b, []byte(r.names[i]))
		b = appendBytes(b, r.results[i])
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func decodeRecovery(b []byte) (recovery, error) {
	var r recovery
	if len(b) == 0 || b[0] != recoveryV1 {
		return r, errBadRecovery
	}
	d := decoder{b: b[1:]}
	r.op = string(d.bytes())
	r.attempts = int(d.uvarint())
	r.ttl = time.Duration(d.uvarint()) * time.Microsecond
	r.input = d.bytes()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = errBadRecovery
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.names = append(r.names, string(d.bytes()))
		r.results = append(r.results, d.bytes())
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errBadRecovery
	}
	return r, d.err
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecovery
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadRecovery
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b[:n])
	d.b = d.b[n:]
	return v
}

// final is the recorded end of an operation: its response, or why it was
// given up.
func final(kind byte, payload []byte) []byte {
	return append([]byte{kind}, payload...)
}

// decodeFinal returns the response recorded by a done operation, or an
// error matching ErrOperationFailed when it was given up.
func decodeFinal(b []byte, scope, key string) ([]byte, error) {
	if len(b) == 0 {
		return nil, errBadRecovery
	}
	switch b[0] {
	case finalResponse:
		return append([]byte{}, b[1:]...), nil
	case finalFailed:
		return nil, fmt.Errorf("%w: key %q in scope %q: %s", ErrOperationFailed, key, scope, b[1:])
	}
	return nil, errBadRecovery
}
