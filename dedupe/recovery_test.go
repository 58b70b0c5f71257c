package dedupe

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestRecoveryRoundTrip(t *testing.T) {
	for _, r := range []recovery{
		{op: "checkout", attempts: 1},
		{op: "checkout", attempts: 3, ttl: 90 * time.Minute, input: []byte("in"), names: []string{"reserve", "charge"}, results: [][]byte{{}, []byte("ch_1")}},
	} {
		got, err := decodeRecovery(r.encode())
		if err != nil {
			t.Fatal(err)
		}
		if got.op != r.op || got.attempts != r.attempts || got.ttl != r.ttl || !bytes.Equal(got.input, r.input) || !reflect.DeepEqual(got.names, r.names) || len(got.results) != len(r.results) {
			t.Fatalf("got %+v, want %+v", got, r)
		}
		for i := range r.results {
			if !bytes.Equal(got.results[i], r.results[i]) {
				t.Fatalf("result %d: %q, want %q", i, got.results[i], r.results[i])
			}
		}
	}
	good := (&recovery{op: "x", attempts: 1, names: []string{"a"}, results: [][]byte{[]byte("r")}}).encode()
	for _, b := range [][]byte{nil, {0x7f}, good[:len(good)-1], append(append([]byte{}, good...), 0), final(finalResponse, []byte("r"))} {
		if _, err := decodeRecovery(b); !errors.Is(err, errBadRecovery) {
			t.Fatalf("decode %x: %v", b, err)
		}
	}
}

func TestDecodeFinal(t *testing.T) {
	got, err := decodeFinal(final(finalResponse, []byte{}), "s", "k")
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty response: %q, %v", got, err)
	}
	if _, err := decodeFinal(final(finalFailed, []byte("why")), "s", "k"); !errors.Is(err, ErrOperationFailed) {
		t.Fatalf("failed: %v", err)
	}
}

func TestStepKeyIsApart(t *testing.T) {
	a, b := StepKey("s", "k/x", "y"), StepKey("s", "k", "x/y")
	if a == b || len(a) != 64 || StepKey("s", "k", "x") != StepKey("s", "k", "x") {
		t.Fatalf("StepKey: %s, %s", a, b)
	}
}
