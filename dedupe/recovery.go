package dedupe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
)

// A key of an operation of several steps stores, in its response column,
// one of these encodings, told apart by their first byte: while leased,
// the recovery point; once done, the final response; once given up, the
// reason. The final encodings name the operation, so that another
// operation under the same key is refused (ErrKeyReuse) rather than
// answered with this one's response; those of pre-release builds
// (finalResponse, finalFailed) do not, and are still read, as of no known
// operation.
const (
	recoveryV1      byte = 0x01
	finalResponse   byte = 0x10 // pre-release builds: the response
	finalFailed     byte = 0x11 // pre-release builds: the reason
	finalResponseOp byte = 0x12 // the operation's name, then the response
	finalFailedOp   byte = 0x13 // the operation's name, then the reason
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

// final is the recorded end of operation op: its response (failed
// false), or why it was given up (failed true).
func final(op string, failed bool, payload []byte) []byte {
	kind := finalResponseOp
	if failed {
		kind = finalFailedOp
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(op)+len(payload))
	b = append(b, kind)
	b = appendBytes(b, []byte(op))
	return append(b, payload...)
}

// opEnd is a recorded end of an operation, as decodeFinal reads it.
type opEnd struct {
	op      string // the operation's name; "" when not recorded (pre-release builds)
	failed  bool   // given up: payload is the reason
	payload []byte // the response, or the reason
}

// decodeFinal reads the recorded end of an operation.
func decodeFinal(b []byte) (opEnd, error) {
	if len(b) == 0 {
		return opEnd{}, errBadRecovery
	}
	switch b[0] {
	case finalResponse, finalFailed:
		return opEnd{failed: b[0] == finalFailed, payload: append([]byte{}, b[1:]...)}, nil
	case finalResponseOp, finalFailedOp:
		d := decoder{b: b[1:]}
		op := d.bytes()
		if d.err != nil {
			return opEnd{}, d.err
		}
		return opEnd{op: string(op), failed: b[0] == finalFailedOp, payload: append([]byte{}, d.b...)}, nil
	}
	return opEnd{}, errBadRecovery
}

// answer is the answer of a done key to a call of operation op: the
// response, an error matching ErrOperationFailed when the operation was
// given up, sqlonce.ErrKeyReuse when another operation ran the key.
func (e opEnd) answer(op, scope, key string) ([]byte, error) {
	if e.op != "" && e.op != op {
		return nil, fmt.Errorf("%w: key %q in scope %q was run by operation %q, not %q", sqlonce.ErrKeyReuse, key, scope, e.op, op)
	}
	if e.failed {
		return nil, fmt.Errorf("%w: key %q in scope %q: %s", ErrOperationFailed, key, scope, e.payload)
	}
	return e.payload, nil
}
