package outbox

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"
)

func TestHeadersRoundTrip(t *testing.T) {
	for _, h := range []map[string]string{
		nil,
		{"a": ""},
		{"content-type": "application/json", "b": "x\x00y", "Nats-Msg-Id": "m-1"},
	} {
		b := encodeHeaders(h)
		got, err := decodeHeaders(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) == 0 && len(got) == 0 {
			continue
		}
		if !maps.Equal(got, h) {
			t.Fatalf("round trip of %v gave %v", h, got)
		}
	}
	if _, err := decodeHeaders([]byte{5, 'a'}); err == nil {
		t.Fatal("a truncated encoding decoded")
	}
}

func TestFingerprintTellsFieldsApart(t *testing.T) {
	h := encodeHeaders(map[string]string{"k": "v"})
	base := fingerprint("t", "k", []byte("p"), h)
	if !bytes.Equal(base, fingerprint("t", "k", []byte("p"), encodeHeaders(map[string]string{"k": "v"}))) {
		t.Fatal("the same message has two fingerprints")
	}
	for name, fp := range map[string][]byte{
		"topic":   fingerprint("u", "k", []byte("p"), h),
		"key":     fingerprint("t", "", []byte("p"), h),
		"payload": fingerprint("t", "k", []byte("q"), h),
		"headers": fingerprint("t", "k", []byte("p"), nil),
		"shifted": fingerprint("tk", "", []byte("p"), h),
	} {
		if bytes.Equal(fp, base) {
			t.Errorf("another %s, the same fingerprint", name)
		}
	}
}

func TestPermanent(t *testing.T) {
	cause := errors.New("refused")
	err := Permanent(cause)
	if !errors.Is(err, ErrPermanent) || !errors.Is(err, cause) {
		t.Fatalf("%v matches ErrPermanent %v, its cause %v", err, errors.Is(err, ErrPermanent), errors.Is(err, cause))
	}
	if !errors.Is(Permanent(nil), ErrPermanent) {
		t.Fatal("Permanent(nil) is not ErrPermanent")
	}
}

func TestBackoffBounds(t *testing.T) {
	r := &relay[struct{}]{o: relayOptions{backoff: 10 * time.Millisecond, maxBackoff: 100 * time.Millisecond}}
	for attempt, bound := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 5: 100 * time.Millisecond, 60: 100 * time.Millisecond} {
		for range 50 {
			if d := r.backoff(attempt); d < bound/2 || d > bound {
				t.Fatalf("backoff after attempt %d: %v, outside %v..%v", attempt, d, bound/2, bound)
			}
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Pending: "pending", Sent: "sent", Parked: "parked", State(7): "State(7)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}

func TestErrText(t *testing.T) {
	long := errors.New(string(bytes.Repeat([]byte("é"), 1000)))
	if s := errText(long); len(s) > 1000 || !bytes.Equal([]byte(s)[:2], []byte("é")) {
		t.Fatalf("errText: %d bytes", len(s))
	}
}
