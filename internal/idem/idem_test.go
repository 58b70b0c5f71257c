package idem

import (
	"strings"
	"testing"
)

func TestScopeUnambiguous(t *testing.T) {
	if Scope('k', "p") == Scope('s', "p") {
		t.Fatal("client and derived keys share a scope")
	}
	if Scope('k', "alice") == Scope('k', "bob") {
		t.Fatal("two callers share a scope")
	}
	long := Scope('k', strings.Repeat("p", 300))
	if len(long) > 255 || !strings.HasPrefix(long, "k#") {
		t.Fatalf("long scope %q", long)
	}
	if bad := Scope('k', "p\x00"); !strings.HasPrefix(bad, "k#") {
		t.Fatalf("scope with NUL kept readable: %q", bad)
	}
	// A readable scope never looks like a hashed one.
	if s := Scope('k', "#"+strings.Repeat("0", 64)); strings.HasPrefix(s, "k#") {
		t.Fatalf("readable scope %q looks hashed", s)
	}
}
