package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func load(t *testing.T, files ...string) *run {
	t.Helper()
	r := newRun()
	for _, name := range files {
		f, err := os.Open("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r.read(name, f)
		f.Close()
	}
	return r
}

func TestStatus(t *testing.T) {
	r := load(t, "allskipped.json", "mixed.json")
	for _, c := range []struct{ pkg, status, note string }{
		// Every leaf skipped, although go test says the package and
		// TestB passed.
		{"example.com/m/cluster", "skip", " (all 3 tests skipped)"},
		// One subtest skipped beside tests that passed.
		{"example.com/m/store", "pass", ""},
		{"example.com/m/cmd/tool", "skip", " (no test files)"},
		{"example.com/m/bench", "skip", " (no tests ran)"},
		{"example.com/m/broken", "FAIL", ""},
	} {
		p := r.pkgs[c.pkg]
		if p == nil {
			t.Fatalf("%s: not read", c.pkg)
		}
		if status, note := p.status(); status != c.status || note != c.note {
			t.Errorf("%s: status %q%q, want %q%q", c.pkg, status, note, c.status, c.note)
		}
	}
	if status, _ := (&pkg{tests: map[string]*test{}}).status(); status != "NO RESULT" {
		t.Errorf("a package without a result: %q, want NO RESULT", status)
	}
}

func TestSkips(t *testing.T) {
	r := load(t, "allskipped.json", "mixed.json")
	got := r.pkgs["example.com/m/cluster"].skips()
	want := []skipGroup{
		// TestA logged a line before it skipped, and its skip message
		// has a second line: the reason is the message's first line.
		{"no cluster: galera-4 is not installed", []string{"TestA", "TestB/one"}},
		{"(no message)", []string{"TestB/two"}},
	}
	if len(got) != len(want) {
		t.Fatalf("skips: %q, want %q", got, want)
	}
	for i := range want {
		if got[i].reason != want[i].reason || strings.Join(got[i].tests, ",") != strings.Join(want[i].tests, ",") {
			t.Errorf("skips[%d]: %q, want %q", i, got[i], want[i])
		}
	}
	if s := r.pkgs["example.com/m/store"].skips(); len(s) != 1 || s[0].reason != "no Vitess build (run .ci/vitess-build)" {
		t.Errorf("store's skips: %q", s)
	}
}

func TestReport(t *testing.T) {
	r := load(t, "allskipped.json", "mixed.json")
	r.wall, r.cpu = 100, 250
	var out bytes.Buffer
	if rc := r.report(&out, 3); rc != 1 {
		t.Errorf("rc %d, want 1 (a test failed)", rc)
	}
	for _, want := range []string{
		"skip      0.0s  example.com/m/cluster (all 3 tests skipped)\n" +
			"      skipped 2: no cluster: galera-4 is not installed (TestA, TestB/one)\n" +
			"      skipped 1: (no message) (TestB/two)\n",
		"pass      1.8s  example.com/m/store\n" +
			"      skipped 1: no Vitess build (run .ci/vitess-build) (TestGet/Vitess)\n",
		"FAIL      0.0s  example.com/m/broken\n",
		"==> FAIL example.com/m/broken TestBad (0.0s)\n    bad_test.go:9: got 1, want 2\n",
		// TestB and TestGet count among the passed: go test reports them so.
		"==> 4 tests passed, 1 failed, 4 skipped; 5 packages, 1 failed, 3 skipped whole\n",
		"==> wall 1m40s, CPU 4m10s (user+sys of go test and its children): 2.5 cores busy on average\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks\n%s\nreport:\n%s", want, out.String())
		}
	}

	// Skips alone do not fail the run.
	r = load(t, "allskipped.json")
	out.Reset()
	if rc := r.report(&out, 3); rc != 0 {
		t.Errorf("only skips: rc %d, want 0\n%s", rc, out.String())
	}
	if strings.Contains(out.String(), "==> wall") {
		t.Errorf("no -wall or -cpu given, yet a time line:\n%s", out.String())
	}
}

func TestNames(t *testing.T) {
	if got := names([]string{"a", "b", "c", "d", "e", "f"}, 4); got != "a, b, c, d and 2 more" {
		t.Errorf("names: %q", got)
	}
	if got := names([]string{"a", "b"}, 4); got != "a, b" {
		t.Errorf("names: %q", got)
	}
}
