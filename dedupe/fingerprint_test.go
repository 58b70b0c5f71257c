package dedupe_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/sqlonce/sqlonce/dedupe"
)

func TestFingerprint(t *testing.T) {
	b := func(s ...string) [][]byte {
		parts := make([][]byte, len(s))
		for i, p := range s {
			parts[i] = []byte(p)
		}
		return parts
	}
	// Every pair here must differ: concatenating the parts would make each
	// pair collide.
	for _, pair := range [][2][][]byte{
		{b("ab", "c"), b("a", "bc")},
		{b("abc"), b("ab", "c")},
		{b("abc", ""), b("abc")},
		{b("", "abc"), b("abc")},
		{b(""), nil},
		{b("", ""), b("")},
		{b("POST", "/pay", `{"a":1}`), b("POST", "/pay", `{"a":2}`)},
		{b("GET", "/x"), b("/x", "GET")},
		{b("\x00"), b("")},
	} {
		x, y := dedupe.Fingerprint(pair[0]...), dedupe.Fingerprint(pair[1]...)
		if bytes.Equal(x, y) {
			t.Errorf("Fingerprint(%q) == Fingerprint(%q)", pair[0], pair[1])
		}
	}

	got := dedupe.Fingerprint([]byte("POST"), []byte("/pay"))
	if len(got) != sha256.Size {
		t.Fatalf("length %d, want %d", len(got), sha256.Size)
	}
	if !bytes.Equal(got, dedupe.Fingerprint([]byte("POST"), []byte("/pay"))) {
		t.Fatal("not deterministic")
	}
	// Pinned: the fingerprint is stored with keys, so a change of encoding
	// would turn every retry after an upgrade into ErrKeyReuse.
	want := sha256.Sum256([]byte("\x00\x00\x00\x00\x00\x00\x00\x04POST\x00\x00\x00\x00\x00\x00\x00\x04/pay"))
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("Fingerprint(POST, /pay) = %x, want %x", got, want)
	}
	if empty := sha256.Sum256(nil); !bytes.Equal(dedupe.Fingerprint(), empty[:]) {
		t.Fatalf("Fingerprint() = %x, want SHA-256 of nothing", dedupe.Fingerprint())
	}
}

func TestFingerprintJSON(t *testing.T) {
	same := [][]any{
		{`{"a":1,"b":[1,2],"c":{"y":true,"x":null}}`, `{ "c" : { "x" : null , "y" : true } , "b" : [ 1 , 2 ] , "a" : 1 }`, "\n\t{\"b\":[1,2],\r\n\"a\":1,\"c\":{\"x\":null,\"y\":true}}\n"},
		{`"é"`, `"\u00e9"`, `"\u00E9"`},
		{`"<&>"`, `"\u003c\u0026\u003e"`},
		{`[]`, ` [ ] `},
		{`{}`, "{\n}"},
		{`null`, ` null `},
		// A Go value hashes as its JSON encoding does.
		{map[string]any{"b": 2, "a": "x"}, `{"a":"x","b":2}`, json.RawMessage(`{"b":2,"a":"x"}`), []byte(`{"b" : 2, "a" : "x"}`)},
		{struct {
			B int    `json:"b"`
			A string `json:"a"`
		}{2, "x"}, `{"a":"x","b":2}`},
	}
	distinct := []any{
		`{"a":1}`, `{"a":"1"}`, `{"a":1.0}`, `{"a":1e0}`, `{"a":10}`, `{"a":1e1}`, `{"a":-0}`, `{"a":0}`,
		`{"a":true}`, `{"a":null}`, `{}`, `{"A":1}`, `{"a ":1}`,
		`[1,2]`, `[2,1]`, `[[1,2]]`, `["1","2"]`,
		`"é"`, `"e\u0301"`, `""`, `" "`,
		`12345678901234567890123`, `12345678901234567890124`, // beyond float64: kept as written
	}

	hash := func(v any) []byte {
		t.Helper()
		if s, ok := v.(string); ok {
			v = []byte(s)
		}
		fp, err := dedupe.FingerprintJSON(v)
		if err != nil {
			t.Fatalf("FingerprintJSON(%s): %v", v, err)
		}
		if len(fp) != sha256.Size {
			t.Fatalf("FingerprintJSON(%s): %d bytes, want %d", v, len(fp), sha256.Size)
		}
		return fp
	}
	for _, group := range same {
		first := hash(group[0])
		for _, v := range group[1:] {
			if !bytes.Equal(hash(v), first) {
				t.Errorf("FingerprintJSON(%s) != FingerprintJSON(%s)", v, group[0])
			}
		}
	}
	seen := map[string]any{}
	for _, v := range distinct {
		fp := string(hash(v))
		if prev, ok := seen[fp]; ok {
			t.Errorf("FingerprintJSON(%s) == FingerprintJSON(%s)", v, prev)
		}
		seen[fp] = v
	}

	for _, bad := range []string{
		``, ` `, `{`, `{"a":1`, `{"a":}`, `[1,]`, `{'a':1}`, `NaN`, `01`, `"\x01"`,
		`{"a":1} {"a":1}`, `{"a":1}}`, `{"a":1}]`, `{"a":1},`, `[1]]`, `1 2`, `"a""b"`, `{"a":1}x`, `null null`,
	} {
		if fp, err := dedupe.FingerprintJSON([]byte(bad)); err == nil {
			t.Errorf("FingerprintJSON(%q) = %x, want an error", bad, fp)
		}
	}
	if _, err := dedupe.FingerprintJSON(make(chan int)); err == nil {
		t.Error("FingerprintJSON(chan) did not fail")
	}
	// Trailing white space is not trailing data.
	if !bytes.Equal(hash("{\"a\":1}\n\t\r "), hash(`{"a":1}`)) {
		t.Error("trailing white space changed the fingerprint")
	}
}
