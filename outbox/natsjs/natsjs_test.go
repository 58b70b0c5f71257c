package natsjs

import (
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
)

// The checks that need no broker; tests/outboxbroker runs the Publisher
// against a real NATS server.

func TestCheckSubject(t *testing.T) {
	for s, ok := range map[string]bool{
		"orders":          true,
		"orders.placed":   true,
		"a.b-c_d.e":       true,
		"":                false,
		"a..b":            false,
		".a":              false,
		"a.":              false,
		"a b":             false,
		"a\tb":            false,
		"a.*":             false,
		"a.>":             false,
		"a.*b":            true, // not a wildcard token
		"orders.\r\nPUB ": false,
	} {
		if err := checkSubject(s); (err == nil) != ok {
			t.Errorf("checkSubject(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func TestCheckHeaderName(t *testing.T) {
	for s, ok := range map[string]bool{
		"Content-Type": true,
		"X_Y.z":        true,
		"":             false,
		"a b":          false,
		"a:b":          false,
		"a\r":          false,
		"é":            false,
	} {
		if err := checkHeaderName(s); (err == nil) != ok {
			t.Errorf("checkHeaderName(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func TestOptions(t *testing.T) {
	if _, err := New(nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
	for name, c := range map[string]struct {
		opt Option
		ok  bool
	}{
		"prefix":            {WithSubjectPrefix("orders."), true},
		"prefix no dot":     {WithSubjectPrefix("svc-"), true},
		"prefix empty":      {WithSubjectPrefix(""), false},
		"prefix wildcard":   {WithSubjectPrefix("a.>."), false},
		"prefix empty tok":  {WithSubjectPrefix("a..b."), false},
		"prefix only dot":   {WithSubjectPrefix("."), false},
		"key header":        {WithKeyHeader("Order-Key"), true},
		"key header msg id": {WithKeyHeader("nats-msg-id"), false},
		"key header colon":  {WithKeyHeader("a:b"), false},
	} {
		var o options
		if err := c.opt(&o); (err == nil) != c.ok || err != nil && !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ok=%v", name, err, c.ok)
		}
	}
}
