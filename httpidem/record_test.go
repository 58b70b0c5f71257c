package httpidem

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

func TestRecordRoundTrip(t *testing.T) {
	rec := newRecorder(1 << 10)
	rec.Header().Set("Content-Type", "application/octet-stream")
	rec.Header().Add("Link", "</a>; rel=a")
	rec.Header().Add("Link", "</b>; rel=b")
	rec.Header().Set("Set-Cookie", "session=secret")
	rec.WriteHeader(http.StatusEarlyHints) // interim: not the final status
	rec.WriteHeader(http.StatusCreated)
	rec.WriteHeader(http.StatusTeapot) // ignored, as net/http does
	body := []byte{0, 1, 2, 0xff, '\r', '\n'}
	if _, err := rec.Write(body); err != nil {
		t.Fatal(err)
	}
	b, err := rec.encode(canonical([]string{"content-type", "link", "location"}), dedupe.MaxResponseSize)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.status != http.StatusCreated || !bytes.Equal(got.body.Bytes(), body) {
		t.Fatalf("status %d body %x", got.status, got.body.Bytes())
	}
	want := http.Header{"Content-Type": {"application/octet-stream"}, "Link": {"</a>; rel=a", "</b>; rel=b"}}
	if !reflect.DeepEqual(got.header, want) {
		t.Fatalf("headers %v, want %v", got.header, want)
	}
	w := httptest.NewRecorder()
	got.writeTo(w)
	if w.Code != http.StatusCreated || w.Header().Get("Content-Length") != "6" || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("written %d %v %x", w.Code, w.Header(), w.Body.Bytes())
	}
}

// A record of version 1 (no body length) written before version 2 still
// replays.
func TestRecordVersion1(t *testing.T) {
	v1 := []byte{1, 0, 201, 0, 1, 0, 4, 'L', 'i', 'n', 'k', 0, 1, 0, 0, 0, 2, '<', '>', 'h', 'i'}
	got, err := decode(v1)
	if err != nil {
		t.Fatal(err)
	}
	if got.status != 201 || got.header.Get("Link") != "<>" || got.body.String() != "hi" {
		t.Fatalf("v1 decoded as %d %v %q", got.status, got.header, got.body.String())
	}
}

func TestRecordDefaultsAndLimits(t *testing.T) {
	rec := newRecorder(4)
	if rec.finalStatus() != http.StatusOK {
		t.Fatalf("status of a silent handler %d", rec.finalStatus())
	}
	if _, err := rec.Write([]byte("12345")); err == nil || !rec.overrun {
		t.Fatal("a write over the limit was kept")
	}
	for _, b := range [][]byte{
		nil, {2}, {1, 0, 200, 0, 1, 0, 9},
		{2, 0, 200, 0, 0, 0, 0, 0, 3, 'a', 'b'},        // body shorter than its length
		{2, 0, 200, 0, 0, 0, 0, 0, 1, 'a', 'b'},        // body longer than its length
		{2, 0, 200, 0, 0},                              // no body length
		{2, 0, 0, 0, 0, 0, 0, 0, 0},                    // status 0
		{2, 0, 200, 0, 1, 0, 1, 'A', 0, 0, 0, 0, 0, 0}, // a field with no value
	} {
		if _, err := decode(b); err == nil {
			t.Fatalf("decode(%x) accepted a malformed record", b)
		}
	}
}

// More values of one header field than the record can count must be
// refused, not written with a truncated count that then replays one value
// and the rest as body (the bug: a uint16 count without a bound).
func TestRecordRefusesWhatItCannotCount(t *testing.T) {
	rec := newRecorder(1 << 10)
	rec.Header().Set("Content-Type", "text/plain")
	for i := range maxRecordCount + 1 {
		rec.Header().Add("Link", strings.Repeat("x", i%3))
	}
	rec.WriteHeader(http.StatusCreated)
	_, _ = rec.Write([]byte("8 bytes!"))
	keep := canonical([]string{"Content-Type", "Link"})
	_, err := rec.encode(keep, dedupe.MaxResponseSize)
	if !errors.Is(err, sqlonce.ErrResponseTooLarge) || !strings.Contains(err.Error(), "65536 values") {
		t.Fatalf("encode of 65,536 values: %v", err)
	}
	// At the bound it is exact.
	rec.header["Link"] = rec.header["Link"][:maxRecordCount]
	b, err := rec.encode(keep, dedupe.MaxResponseSize)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.header["Link"]) != maxRecordCount || got.body.String() != "8 bytes!" {
		t.Fatalf("replayed %d values and a body of %d bytes", len(got.header["Link"]), got.body.Len())
	}
	// A record over the store's limit is refused too.
	if _, err := rec.encode(keep, 1<<10); !errors.Is(err, sqlonce.ErrResponseTooLarge) {
		t.Fatalf("record over the limit: %v", err)
	}
	// So is a name longer than its uint16 length.
	rec = newRecorder(1 << 10)
	long := http.CanonicalHeaderKey(strings.Repeat("n", maxRecordCount+1))
	rec.Header().Set(long, "v")
	if _, err := rec.encode([]string{long}, dedupe.MaxResponseSize); !errors.Is(err, sqlonce.ErrResponseTooLarge) {
		t.Fatalf("a name of 65,536 bytes: %v", err)
	}
}

// FuzzRecord: whatever a handler answers, the record either reads back
// exactly or is refused; and decode of arbitrary bytes either fails or
// gives what encode writes back identically.
func FuzzRecord(f *testing.F) {
	f.Add(201, "Link", "</a>", uint16(2), []byte("body"), []byte{2, 0, 200, 0, 0, 0, 0, 0, 0})
	f.Add(200, "Content-Type", "", uint16(0), []byte{}, []byte{1, 0, 200, 0, 0, 'x'})
	f.Add(599, "Etag", "\x00\xff", uint16(300), []byte{0, 0xff}, []byte{2, 0, 201, 0, 1, 0, 1, 'A', 0, 1, 0, 0, 0, 1, 'v', 0, 0, 0, 1, 'b'})
	f.Fuzz(func(t *testing.T, status int, name, value string, values uint16, body []byte, raw []byte) {
		rec := newRecorder(len(body))
		name = http.CanonicalHeaderKey(name)
		for range values {
			rec.Header().Add(name, value)
		}
		if status >= 200 && status <= 999 {
			rec.WriteHeader(status)
		}
		_, _ = rec.Write(body)
		keep := []string{name}
		b, err := rec.encode(keep, dedupe.MaxResponseSize)
		if err == nil {
			got, err := decode(b)
			if err != nil {
				t.Fatalf("decode(encode()) = %v", err)
			}
			if got.status != rec.finalStatus() || !bytes.Equal(got.body.Bytes(), body) || len(got.header[name]) != len(rec.header[name]) {
				t.Fatalf("round trip: %d %q %d values, want %d %q %d", got.status, got.body.Bytes(), len(got.header[name]), rec.finalStatus(), body, len(rec.header[name]))
			}
			for i, v := range got.header[name] {
				if v != value {
					t.Fatalf("value %d is %q, want %q", i, v, value)
				}
			}
		} else if !errors.Is(err, sqlonce.ErrResponseTooLarge) {
			t.Fatalf("encode refused with %v", err)
		}
		got, err := decode(raw)
		if err != nil || raw[0] != recordVersion {
			return
		}
		names := make([]string, 0, len(got.header))
		for k := range got.header {
			names = append(names, k)
		}
		// encode writes fields in keep's order; raw's may be another.
		again, err := got.encode(names, dedupe.MaxResponseSize)
		if err != nil {
			t.Fatalf("re-encode of a decoded record: %v", err)
		}
		back, err := decode(again)
		if err != nil || back.status != got.status || !bytes.Equal(back.body.Bytes(), got.body.Bytes()) || !reflect.DeepEqual(back.header, got.header) {
			t.Fatalf("decode/encode/decode differs: %v", err)
		}
	})
}
