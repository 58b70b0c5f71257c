package idem

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
)

// The shared checks of WithTTL and WithMaxResponseSize: 0 is the default,
// out of range is ErrInvalidArgument naming the transport and the option.
func TestOptionChecks(t *testing.T) {
	if d, err := TTL("x", 0); d != dedupe.DefaultTTL || err != nil {
		t.Errorf("TTL(0) = %v, %v", d, err)
	}
	if d, err := TTL("x", time.Minute); d != time.Minute || err != nil {
		t.Errorf("TTL(1m) = %v, %v", d, err)
	}
	if _, err := TTL("x", -1); !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "x: WithTTL:") {
		t.Errorf("TTL(-1): %v", err)
	}
	for _, tc := range []struct{ n, def, want int }{{0, 7, 7}, {1, 7, 1}, {dedupe.MaxResponseSize, 7, dedupe.MaxResponseSize}} {
		if n, err := MaxResponseSize("x", tc.n, tc.def); n != tc.want || err != nil {
			t.Errorf("MaxResponseSize(%d, %d) = %d, %v, want %d", tc.n, tc.def, n, err, tc.want)
		}
	}
	for _, n := range []int{-1, dedupe.MaxResponseSize + 1} {
		if _, err := MaxResponseSize("x", n, 7); !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "x: WithMaxResponseSize:") {
			t.Errorf("MaxResponseSize(%d): %v", n, err)
		}
	}
}
