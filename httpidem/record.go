package httpidem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sqlonce/sqlonce"
)

// DefaultResponseHeaders are the response header fields recorded with an
// answer and replayed, unless WithResponseHeaders says otherwise: those
// that describe the representation and the created resource. Fields of
// one exchange (Set-Cookie, Date, tracing ids) are left out: a replay
// carries the first answer, not the first exchange. The first answer
// always carries every field the handler set.
var DefaultResponseHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Location", "Content-Type", "ETag", "Last-Modified", "Link", "Location", "Vary",
}

// RecordFunc decides from an answer's status code whether the answer is
// recorded with its key (WithRecord). A recorded answer is replayed to
// every repeat of the key; one that is not leaves the key free, so that a
// retry runs the handler again. In transactional mode it also decides the
// handler's transaction: committed with the key when recorded, rolled
// back otherwise.
type RecordFunc func(status int) bool

// RecordAll records every answer, success or error: the draft's "respond
// with the result of the previously completed operation, success or an
// error". It is the default.
func RecordAll(int) bool { return true }

// RecordSuccess records 2xx answers only: a client that got an error may
// retry with the same key and have the request run again.
func RecordSuccess(status int) bool { return status >= 200 && status < 300 }

// canonical returns header field names canonicalized, without repeats.
func canonical(names []string) []string {
	out := make([]string, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		n = http.CanonicalHeaderKey(n)
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

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
//	version (1 byte, 2) | status (uint16) | header count (uint16) |
//	per header: name length (uint16), name, value count (uint16),
//	            per value: length (uint32), value |
//	body length (uint32) | body
//
// in big-endian order: compact, binary-safe and independent of the body's
// content type. Every count and length is checked against its field's
// range when a record is written (one that does not fit is refused, never
// truncated) and against the bytes that remain when it is read; the body
// length must account for every byte left. Version 1, without the body
// length (the body was the rest), is still read.
const (
	recordVersion1 = 1
	recordVersion  = 2

	// maxRecordCount bounds header fields per record, values per field and
	// a field name's length: each is written as a uint16.
	maxRecordCount = 1<<16 - 1
)

// errRecordTooLarge is wrapped by encode's error: the answer cannot be
// recorded exactly.
var errRecordTooLarge = fmt.Errorf("%w: httpidem: the answer cannot be recorded exactly", sqlonce.ErrResponseTooLarge)

// encode records status, the headers named in keep (those present) and
// the body. It refuses, with an error matching sqlonce.ErrResponseTooLarge,
// an answer whose record would not read back exactly: a count or length
// over its field's range, or a record over max bytes.
func (r *recorder) encode(keep []string, max int) ([]byte, error) {
	status := r.finalStatus()
	if status < 100 || status > 999 {
		return nil, fmt.Errorf("%w: status %d is not a three-digit code", errRecordTooLarge, status)
	}
	var names []string
	size := 1 + 2 + 2 + 4 + r.body.Len()
	for _, k := range keep {
		vs := r.header.Values(k)
		if len(vs) == 0 {
			continue
		}
		if len(k) > maxRecordCount {
			return nil, fmt.Errorf("%w: header field name of %d bytes, at most %d", errRecordTooLarge, len(k), maxRecordCount)
		}
		if len(vs) > maxRecordCount {
			return nil, fmt.Errorf("%w: header field %s has %d values, at most %d", errRecordTooLarge, k, len(vs), maxRecordCount)
		}
		size += 2 + len(k) + 2
		for _, v := range vs {
			size += 4 + len(v)
		}
		names = append(names, k)
	}
	if len(names) > maxRecordCount {
		return nil, fmt.Errorf("%w: %d header fields, at most %d", errRecordTooLarge, len(names), maxRecordCount)
	}
	if size > max {
		return nil, fmt.Errorf("%w: the record of the answer is %d bytes, at most %d", errRecordTooLarge, size, max)
	}
	b := make([]byte, 0, size)
	b = append(b, recordVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
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
	b = binary.BigEndian.AppendUint32(b, uint32(r.body.Len()))
	return append(b, r.body.Bytes()...), nil
}

var errBadRecord = errors.New("httpidem: recorded response is malformed")

// decode is encode's inverse. It refuses a record whose counts and
// lengths do not account for its bytes exactly.
func decode(b []byte) (*recorder, error) {
	if len(b) < 5 || (b[0] != recordVersion && b[0] != recordVersion1) {
		return nil, errBadRecord
	}
	version := b[0]
	r := newRecorder(len(b))
	r.status = int(binary.BigEndian.Uint16(b[1:]))
	if r.status < 100 || r.status > 999 {
		return nil, errBadRecord
	}
	n := int(binary.BigEndian.Uint16(b[3:]))
	b = b[5:]
	take := func(k int) ([]byte, bool) {
		if k < 0 || len(b) < k {
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
		if !ok || len(name) == 0 {
			return nil, errBadRecord
		}
		c, ok := take(2)
		if !ok {
			return nil, errBadRecord
		}
		count := int(binary.BigEndian.Uint16(c))
		if count == 0 || r.header[string(name)] != nil {
			return nil, errBadRecord // encode writes present fields once
		}
		for range count {
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
	if version == recordVersion {
		l, ok := take(4)
		if !ok || int64(binary.BigEndian.Uint32(l)) != int64(len(b)) {
			return nil, errBadRecord
		}
	}
	r.body.Write(b)
	return r, nil
}
