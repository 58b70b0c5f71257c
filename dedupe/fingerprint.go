package dedupe

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Fingerprint hashes the parts of a request with SHA-256 into a 32-byte
// fingerprint for Request.Fingerprint. Each part is length-prefixed, so
// ("ab", "c") and ("a", "bc") differ. Pass the parts that make two requests
// "the same": method, path, body.
func Fingerprint(parts ...[]byte) []byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// FingerprintJSON hashes v canonically: v is encoded as JSON, decoded and
// encoded again so that object keys are sorted and insignificant white
// space is gone, then hashed with SHA-256. Two JSON documents that differ
// only in key order or spacing get the same fingerprint. v may be a Go value
// or a json.RawMessage / []byte holding JSON.
func FingerprintJSON(v any) ([]byte, error) {
	var raw []byte
	switch t := v.(type) {
	case json.RawMessage:
		raw = t
	case []byte:
		raw = t
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("sqlonce/dedupe: fingerprint: %w", err)
		}
		raw = b
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers as written: 1e3 and 1000 stay distinct
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("sqlonce/dedupe: fingerprint: %w", err)
	}
	// Only white space may follow. Decoder.More would miss a stray '}' or
	// ']', which it reads as the end of an enclosing value.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("sqlonce/dedupe: fingerprint: trailing data after JSON value")
	}
	canon, err := json.Marshal(doc) // maps encode with sorted keys
	if err != nil {
		return nil, fmt.Errorf("sqlonce/dedupe: fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return sum[:], nil
}
