package httpidem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"
)

// recorder buffers a handler's response: nothing reaches the client until
// the transaction that records it has committed, so a client never sees
// an answer for work that then rolled back.
type recorder struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	limit   int  // bytes of body kept; more is an overflow
	overrun bool // the handler wrote more than limit
}

func newRecorder(limit int) *recorder {
	return &recorder{header: make(http.Header), limit: limit}
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	// 1xx responses are interim; the final status is the first >= 200.
	if r.status != 0 || status < 200 {
		return
	}
	r.status = status
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.body.Len()+len(p) > r.limit {
		r.overrun = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(p)
}

// finalStatus is the status the client gets: 200 for a handler that wrote
// nothing, as net/http does.
func (r *recorder) finalStatus() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

var errResponseTooLarge = errors.New("httpidem: response larger than the recording limit")

// writeTo sends the buffered response. Content-Length is always set, so
// that a first answer and its replays travel the same way, never chunked.
func (r *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(r.body.Len()))
	w.WriteHeader(r.finalStatus())
	_, _ = w.Write(r.body.Bytes())
}

// A recorded response is stored as
//
//	version (1 byte) | status (uint16) | header count (uint16) |
//	per header: name length (uint16), name, value count (uint16),
//	            per value: length (uint32), value |
//	body (the rest)
//
// in big-endian order: compact, binary-safe and independent of the body's
// content type.
const recordVersion = 1

// encode records status, the headers named in keep (those present) and
// the body.
func (r *recorder) encode(keep []string) []byte {
	var b []byte
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(r.finalStatus()))
	var names []string
	for _, k := range keep {
		if len(r.header.Values(k)) > 0 {
			names = append(names, k)
		}
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(names)))
	for _, k := range names {
		vs := r.header.Values(k)
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(vs)))
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.body.Bytes()...)
}

var errBadRecord = errors.New("httpidem: recorded response is malformed")

// decode is encode's inverse.
func decode(b []byte) (*recorder, error) {
	if len(b) < 5 || b[0] != recordVersion {
		return nil, errBadRecord
	}
	r := newRecorder(len(b))
	r.status = int(binary.BigEndian.Uint16(b[1:]))
	n := int(binary.BigEndian.Uint16(b[3:]))
	b = b[5:]
	take := func(k int) ([]byte, bool) {
		if len(b) < k {
			return nil, false
		}
		v := b[:k]
		b = b[k:]
		return v, true
	}
	for range n {
		l, ok := take(2)
		if !ok {
			return nil, errBadRecord
		}
		name, ok := take(int(binary.BigEndian.Uint16(l)))
		if !ok {
			return nil, errBadRecord
		}
		c, ok := take(2)
		if !ok {
			return nil, errBadRecord
		}
		for range int(binary.BigEndian.Uint16(c)) {
			vl, ok := take(4)
			if !ok {
				return nil, errBadRecord
			}
			v, ok := take(int(binary.BigEndian.Uint32(vl)))
			if !ok {
				return nil, errBadRecord
			}
			r.header[string(name)] = append(r.header[string(name)], string(v))
		}
	}
	r.body.Write(b)
	return r, nil
}
