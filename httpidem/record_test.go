package httpidem

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
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
	got, err := decode(rec.encode(canonical([]string{"content-type", "link", "location"})))
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

func TestRecordDefaultsAndLimits(t *testing.T) {
	rec := newRecorder(4)
	if rec.finalStatus() != http.StatusOK {
		t.Fatalf("status of a silent handler %d", rec.finalStatus())
	}
	if _, err := rec.Write([]byte("12345")); err == nil || !rec.overrun {
		t.Fatal("a write over the limit was kept")
	}
	for _, b := range [][]byte{nil, {2}, {1, 0, 200, 0, 1, 0, 9}} {
		if _, err := decode(b); err == nil {
			t.Fatalf("decode(%x) accepted a malformed record", b)
		}
	}
}
