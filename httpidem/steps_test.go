package httpidem

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

func TestStepRequestRoundTrip(t *testing.T) {
	for _, q := range []StepRequest{
		{},
		{Principal: "alice", Method: "POST", Route: "POST /pay/{id}", Path: "/pay/42", Query: "a=1&b=%20", Key: "k-1", Body: []byte{0, 1, 0xff}},
		{Principal: "ü", Body: bytes.Repeat([]byte("x"), 300)},
	} {
		got, err := RequestOf(dedupe.StepState{Input: q.encode()})
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if len(q.Body) == 0 {
			q.Body = []byte{}
		}
		if !reflect.DeepEqual(got, q) {
			t.Fatalf("got %+v, want %+v", got, q)
		}
	}
}

func TestRequestOfRefusesOtherInput(t *testing.T) {
	good := StepRequest{Principal: "alice", Key: "k", Body: []byte("body")}.encode()
	for name, in := range map[string][]byte{
		"empty":         nil,
		"not a request": []byte("book"),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"huge length":   {stepRequestV1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, err := RequestOf(dedupe.StepState{Input: in}); !errors.Is(err, errBadStepRequest) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Respond's result is what a Steps handler sends and replays: the status,
// every header field given (canonicalized), the body.
func TestRespond(t *testing.T) {
	body := []byte{0, 1, 2, 0xff}
	b, err := Respond(http.StatusCreated, http.Header{"Content-Type": {"application/json"}, "location": {"/orders/1"}, "X-Two": {"a", "b"}}, body)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}, "X-Two": {"a", "b"}}
	if rec.status != http.StatusCreated || !bytes.Equal(rec.body.Bytes(), body) || !reflect.DeepEqual(rec.header, want) {
		t.Fatalf("status %d header %v body %x", rec.status, rec.header, rec.body.Bytes())
	}
	if _, err := Respond(http.StatusOK, nil, make([]byte, dedupe.MaxResponseSize)); !errors.Is(err, sqlonce.ErrResponseTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, err := Respond(42, nil, nil); err == nil {
		t.Fatal("status 42 accepted")
	}
}
