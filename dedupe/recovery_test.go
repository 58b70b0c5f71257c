package dedupe

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlonce/sqlonce"
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
	for _, b := range [][]byte{nil, {0x7f}, good[:len(good)-1], append(append([]byte{}, good...), 0), final("x", false, []byte("r"))} {
		if _, err := decodeRecovery(b); !errors.Is(err, errBadRecovery) {
			t.Fatalf("decode %x: %v", b, err)
		}
	}
}

func TestDecodeFinal(t *testing.T) {
	answer := func(b []byte, op string) ([]byte, error) {
		e, err := decodeFinal(b)
		if err != nil {
			return nil, err
		}
		return e.answer(op, "s", "k")
	}
	got, err := answer(final("checkout", false, []byte{}), "checkout")
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty response: %q, %v", got, err)
	}
	if got, err := answer(final("checkout", false, []byte("r")), "checkout"); err != nil || string(got) != "r" {
		t.Fatalf("response: %q, %v", got, err)
	}
	if _, err := answer(final("checkout", true, []byte("why")), "checkout"); !errors.Is(err, ErrOperationFailed) {
		t.Fatalf("failed: %v", err)
	}
	// Another operation's end, done or given up, is another's key.
	for _, failed := range []bool{false, true} {
		if got, err := answer(final("checkout", failed, []byte("r")), "refund"); !errors.Is(err, sqlonce.ErrKeyReuse) || got != nil {
			t.Fatalf("another operation's end (failed %v): %q, %v", failed, got, err)
		}
	}
	// The encodings of pre-release builds name no operation: read as before.
	if got, err := answer([]byte{finalResponse, 'r'}, "any"); err != nil || string(got) != "r" {
		t.Fatalf("pre-release response: %q, %v", got, err)
	}
	if _, err := answer([]byte{finalFailed, 'w'}, "any"); !errors.Is(err, ErrOperationFailed) {
		t.Fatalf("pre-release failure: %v", err)
	}
	for _, b := range [][]byte{nil, {0x7f}, {finalResponseOp}, {finalResponseOp, 5, 'a'}} {
		if _, err := decodeFinal(b); !errors.Is(err, errBadRecovery) {
			t.Fatalf("decode %x: %v", b, err)
		}
	}
}

// A recovery point keeps the error that stopped its last run (0x02); one
// without reads as before (0x01). A given-up end (0x14) keeps the step, the
// attempts, the TTL, the error and the recovery point.
func TestRecoveryErrorAndGivenUp(t *testing.T) {
	r := recovery{op: "checkout", attempts: 2, input: []byte("in"), names: []string{"reserve"}, results: [][]byte{[]byte("r")}}
	if b := r.encode(); b[0] != recoveryV1 {
		t.Fatalf("no error: encoded as %#x", b[0])
	}
	long := strings.Repeat("é", maxErrText) // 2 bytes a rune: cut on a rune boundary
	f := r.failedAt("charge", errors.New(long))
	if len(f.errText) > maxErrText || !utf8.ValidString(f.errText) || !strings.HasPrefix(long, f.errText) {
		t.Fatalf("error text of %d bytes, valid %v", len(f.errText), utf8.ValidString(f.errText))
	}
	b := f.encode()
	got, err := decodeRecovery(b)
	if err != nil || b[0] != recoveryV2 || got.errStep != "charge" || got.errText != f.errText || got.op != "checkout" || !reflect.DeepEqual(got.names, r.names) {
		t.Fatalf("decode %#x: %+v, %v", b[0], got, err)
	}
	end, err := decodeFinal(givenUp(b, "checkout", "charge", 3, time.Hour, "card declined"))
	if err != nil || !end.failed || end.op != "checkout" || end.step != "charge" || end.attempts != 3 || end.ttl != time.Hour ||
		string(end.payload) != "card declined" || !bytes.Equal(end.recovery, b) {
		t.Fatalf("given-up end: %+v, %v", end, err)
	}
	_, err = end.answer("checkout", "s", "k")
	if !errors.Is(err, ErrOperationFailed) || !strings.Contains(err.Error(), `given up after 3 attempts, stopped at step "charge": card declined`) {
		t.Fatalf("answer of a given-up end: %v", err)
	}
	if _, err := end.answer("refund", "s", "k"); !errors.Is(err, sqlonce.ErrKeyReuse) {
		t.Fatalf("another operation: %v", err)
	}
	g := givenUp(b, "checkout", "charge", 3, time.Hour, "x")
	for _, bad := range [][]byte{g[:len(g)-1], append(append([]byte{}, g...), 0), {finalGivenUp}} {
		if _, err := decodeFinal(bad); !errors.Is(err, errBadRecovery) {
			t.Fatalf("decode %x: %v", bad, err)
		}
	}
}

func TestStepKeyIsApart(t *testing.T) {
	a, b := StepKey("s", "k/x", "y"), StepKey("s", "k", "x/y")
	if a == b || len(a) != 64 || StepKey("s", "k", "x") != StepKey("s", "k", "x") {
		t.Fatalf("StepKey: %s, %s", a, b)
	}
}
