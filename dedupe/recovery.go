package dedupe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sqlonce/sqlonce"
)

// A key of an operation of several steps stores, in its response column,
// one of these encodings, told apart by their first byte: while leased,
// the recovery point; once done, the final response; once given up, the
// reason. The final encodings name the operation, so that another
// operation under the same key is refused (ErrKeyReuse) rather than
// answered with this one's response; those of pre-release builds
// (finalResponse, finalFailed) do not, and are still read, as of no known
// operation. A recovery point names the error of the step that stopped the
// last run (recoveryV2), and the end of an operation given up after its
// attempts (finalGivenUp) keeps that error, its step, the attempts and the
// recovery point; those of earlier builds are still read.
const (
	recoveryV1      byte = 0x01
	recoveryV2      byte = 0x02 // recoveryV1's fields, then the last step error's step and text
	finalResponse   byte = 0x10 // pre-release builds: the response
	finalFailed     byte = 0x11 // pre-release builds: the reason
	finalResponseOp byte = 0x12 // the operation's name, then the response
	finalFailedOp   byte = 0x13 // the operation's name, then the reason
	finalGivenUp    byte = 0x14 // name, step, attempts, TTL, error text, recovery point
)

// maxErrText bounds the text of a step's error kept in a recovery point.
const maxErrText = 1024

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
	// errStep and errText are the step whose error stopped the last run
	// and the error's text (at most maxErrText bytes); "" when the last
	// run did not stop on a step's error.
	errStep, errText string
}

// failedAt is r with the error of step, which stopped its run.
func (r recovery) failedAt(step string, err error) recovery {
	r.errStep, r.errText = step, truncate(err.Error(), maxErrText)
	return r
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

func (r *recovery) encode() []byte {
	n := 1 + 6*binary.MaxVarintLen64 + len(r.op) + len(r.input)
	for i := range r.names {
		n += 2*binary.MaxVarintLen64 + len(r.names[i]) + len(r.results[i])
	}
	n += 2*binary.MaxVarintLen64 + len(r.errStep) + len(r.errText)
	b := make([]byte, 0, n)
	v := recoveryV1
	if r.errStep != "" || r.errText != "" {
		v = recoveryV2
	}
	b = append(b, v)
	b = appendBytes(b, []byte(r.op))
	b = binary.AppendUvarint(b, uint64(r.attempts))
	b = binary.AppendUvarint(b, uint64(r.ttl.Microseconds()))
	b = appendBytes(b, r.input)
	b = binary.AppendUvarint(b, uint64(len(r.names)))
	for i := range r.names {
		b = appendBytes(b, []byte(r.names[i]))
		b = appendBytes(b, r.results[i])
	}
	if v == recoveryV2 {
		b = appendBytes(b, []byte(r.errStep))
		b = appendBytes(b, []byte(r.errText))
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func decodeRecovery(b []byte) (recovery, error) {
	var r recovery
	if len(b) == 0 || (b[0] != recoveryV1 && b[0] != recoveryV2) {
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
	if b[0] == recoveryV2 {
		r.errStep = string(d.bytes())
		r.errText = string(d.bytes())
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

// givenUp is the recorded end of operation rec.op given up after
// attempts runs, the last stopped at step with the error text ("" when
// none was recorded), and kept for ttl from then: its recovery point,
// rec, is kept too.
func givenUp(rec []byte, op, step string, attempts int, ttl time.Duration, text string) []byte {
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64+len(op)+len(step)+len(text)+len(rec))
	b = append(b, finalGivenUp)
	b = appendBytes(b, []byte(op))
	b = appendBytes(b, []byte(step))
	b = binary.AppendUvarint(b, uint64(attempts))
	b = binary.AppendUvarint(b, uint64(ttl.Microseconds()))
	b = appendBytes(b, []byte(text))
	return appendBytes(b, rec)
}

// opEnd is a recorded end of an operation, as decodeFinal reads it.
type opEnd struct {
	op      string // the operation's name; "" when not recorded (pre-release builds)
	failed  bool   // given up: payload is the reason
	payload []byte // the response, or the reason
	// Given up after its attempts (finalGivenUp only): the step that
	// stopped the last run ("" when unknown), the runs, the TTL the end
	// was recorded for, and the recovery point.
	step     string
	attempts int
	ttl      time.Duration
	recovery []byte
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
	case finalGivenUp:
		d := decoder{b: b[1:]}
		e := opEnd{failed: true}
		e.op = string(d.bytes())
		e.step = string(d.bytes())
		e.attempts = int(d.uvarint())
		e.ttl = time.Duration(d.uvarint()) * time.Microsecond
		e.payload = d.bytes()
		e.recovery = d.bytes()
		if d.err == nil && len(d.b) != 0 {
			d.err = errBadRecovery
		}
		if d.err != nil {
			return opEnd{}, d.err
		}
		return e, nil
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
		return nil, fmt.Errorf("%w: key %q in scope %q: %s", ErrOperationFailed, key, scope, e.reason())
	}
	return e.payload, nil
}

// reason tells why the operation was given up.
func (e opEnd) reason() string {
	if e.attempts == 0 {
		return string(e.payload) // an earlier build's reason
	}
	r := fmt.Sprintf("operation %q given up after %d attempts", e.op, e.attempts)
	if e.step != "" {
		r += fmt.Sprintf(", stopped at step %q", e.step)
	}
	if len(e.payload) > 0 {
		r += ": " + string(e.payload)
	}
	return r
}
