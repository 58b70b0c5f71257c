// Command testreport reads the files `go test -json` wrote (one per module,
// as tests/run runs them) and prints what a person needs at the end of a
// run: one line per package with its result and time, and under it the
// tests it skipped grouped by reason (the first line of the skip message);
// the output of every failed test; the failures that belong to no test (a
// build error, a panic, a timeout); the slowest packages and tests, so that
// the next regression in speed is seen in the run that makes it; and the
// run's wall and CPU time when given, so that machines of different speed
// compare.
//
// A package that passed without running a test to its end (every test
// skipped, or none ran) is shown as "skip", not "pass". It exits 1 when
// anything failed or a package has no result; skips do not fail the run.
//
//	go run ./internal/testreport [-top N] [-wall SECONDS -cpu SECONDS] FILE...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

type test struct {
	pkg, name string
	action    string
	elapsed   float64
	output    []string
}

type pkg struct {
	name    string
	action  string // pass, fail, skip, or "" when the file holds no result
	elapsed float64
	output  []string // output that belongs to no test
	tests   map[string]*test
	order   []string
}

func main() {
	top := flag.Int("top", 10, "how many of the slowest packages and tests to list")
	wall := flag.Float64("wall", 0, "the run's wall time in seconds, printed beside -cpu")
	cpu := flag.Float64("cpu", 0, "the run's CPU time in seconds (user+sys of go test and its children)")
	flag.Parse()
	r := newRun()
	for _, file := range flag.Args() {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		r.read(file, f)
		f.Close()
	}
	r.wall, r.cpu = *wall, *cpu
	os.Exit(r.report(os.Stdout, *top))
}

// run is what the files of one run said.
type run struct {
	pkgs      map[string]*pkg
	order     []string
	bad       []string // lines that are not test events
	wall, cpu float64  // seconds; 0 when not given
}

func newRun() *run { return &run{pkgs: map[string]*pkg{}} }

func (r *run) get(name string) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{name: name, tests: map[string]*test{}}
		r.pkgs[name] = p
		r.order = append(r.order, name)
	}
	return p
}

// read adds the events of one `go test -json` file, named file in messages.
func (r *run) read(file string, in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go test prints build errors as plain text beside the JSON.
			r.bad = append(r.bad, file+": "+string(line))
			continue
		}
		if e.Package == "" && e.ImportPath != "" {
			e.Package = e.ImportPath // build-output and build-fail events
		}
		if e.Package == "" {
			continue
		}
		p := r.get(e.Package)
		if e.Action == "build-output" {
			p.output = append(p.output, e.Output)
			continue
		}
		if e.Action == "build-fail" {
			p.action = "fail"
			continue
		}
		if e.Test == "" {
			switch e.Action {
			case "output":
				p.output = append(p.output, e.Output)
			case "pass", "fail", "skip":
				p.action, p.elapsed = e.Action, e.Elapsed
			}
			continue
		}
		t := p.tests[e.Test]
		if t == nil {
			t = &test{pkg: e.Package, name: e.Test}
			p.tests[e.Test] = t
			p.order = append(p.order, e.Test)
		}
		switch e.Action {
		case "output":
			t.output = append(t.output, e.Output)
		case "pass", "fail", "skip":
			t.action, t.elapsed = e.Action, e.Elapsed
		}
	}
	if err := sc.Err(); err != nil {
		r.bad = append(r.bad, fmt.Sprintf("%s: %v", file, err))
	}
}

func (r *run) report(w io.Writer, top int) int {
	failed := 0
	var passed, skipped, failedTests, skippedPkgs int
	fmt.Fprintln(w, "==> packages")
	for _, name := range r.order {
		p := r.pkgs[name]
		status, note := p.status()
		switch status {
		case "NO RESULT", "FAIL":
			failed++
		case "skip":
			skippedPkgs++
		}
		fmt.Fprintf(w, "%-5s %7.1fs  %s%s\n", status, p.elapsed, name, note)
		for _, g := range p.skips() {
			fmt.Fprintf(w, "      skipped %d: %s (%s)\n", len(g.tests), g.reason, names(g.tests, 4))
		}
		for _, tn := range p.order {
			switch p.tests[tn].action {
			case "pass":
				passed++
			case "skip":
				skipped++
			case "fail":
				failedTests++
			}
		}
	}
	for _, name := range r.order {
		p := r.pkgs[name]
		leaves := failedLeaves(p)
		for _, t := range leaves {
			fmt.Fprintf(w, "\n==> FAIL %s %s (%.1fs)\n%s", p.name, t.name, t.elapsed, strings.Join(t.output, ""))
		}
		if p.action == "fail" && len(leaves) == 0 || p.action == "" {
			// No failed test explains it: a build error, a panic, a
			// timeout or a TestMain failure. Its output says which.
			fmt.Fprintf(w, "\n==> %s failed outside any test:\n%s", p.name, tail(p.output, 60))
		}
	}
	if len(r.bad) > 0 {
		fmt.Fprintf(w, "\n==> lines that are not test events:\n%s\n", strings.Join(r.bad, "\n"))
	}
	slowest(w, r.pkgs, r.order, top)
	fmt.Fprintf(w, "\n==> %d tests passed, %d failed, %d skipped; %d packages, %d failed, %d skipped whole\n",
		passed, failedTests, skipped, len(r.order), failed, skippedPkgs)
	if r.wall > 0 || r.cpu > 0 {
		fmt.Fprintf(w, "==> wall %s, CPU %s (user+sys of go test and its children)", dur(r.wall), dur(r.cpu))
		if r.wall > 0 {
			fmt.Fprintf(w, ": %.1f cores busy on average", r.cpu/r.wall)
		}
		fmt.Fprintln(w)
	}
	if failed > 0 || failedTests > 0 {
		return 1
	}
	return 0
}

// status returns the package's result as the report shows it, and a note
// to print after its name. A package that passed without any test passing
// (every test that ran to its end skipped, or no test at all) is "skip":
// it proved nothing, and says so.
func (p *pkg) status() (status, note string) {
	switch p.action {
	case "":
		return "NO RESULT", ""
	case "fail":
		return "FAIL", ""
	case "skip":
		return "skip", " (no test files)"
	}
	parents := map[string]bool{}
	for _, tn := range p.order {
		for i := range len(tn) {
			if tn[i] == '/' {
				parents[tn[:i]] = true
			}
		}
	}
	var leaves, skips int
	for _, tn := range p.order {
		t := p.tests[tn]
		if parents[tn] {
			continue
		}
		leaves++
		switch t.action {
		case "pass", "fail", "":
			return p.action, ""
		case "skip":
			skips++
		}
	}
	if leaves == 0 {
		return "skip", " (no tests ran)"
	}
	return "skip", fmt.Sprintf(" (all %d tests skipped)", skips)
}

// skipGroup is the tests of one package skipped for one reason.
type skipGroup struct {
	reason string
	tests  []string
}

// skips returns the package's skipped tests grouped by reason, in the
// order the reasons first appear.
func (p *pkg) skips() []skipGroup {
	var out []skipGroup
	at := map[string]int{}
	for _, tn := range p.order {
		t := p.tests[tn]
		if t.action != "skip" {
			continue
		}
		reason := skipReason(t.output)
		i, ok := at[reason]
		if !ok {
			i = len(out)
			at[reason] = i
			out = append(out, skipGroup{reason: reason})
		}
		out[i].tests = append(out[i].tests, tn)
	}
	return out
}

// logLine is a line t.Log, t.Skip and the like print: indented, then the
// file and line that called them.
var logLine = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: ?(.*)$`)

// skipReason returns the first line of a skipped test's skip message: the
// last line of its output that starts a message (t.Skip is the last thing
// a test prints; a message's further lines are indented more and name no
// file). A test skipped without a message (t.SkipNow) has "(no message)".
func skipReason(output []string) string {
	reason := ""
	for _, chunk := range output {
		for _, line := range strings.Split(strings.TrimRight(chunk, "\n"), "\n") {
			if m := logLine.FindStringSubmatch(line); m != nil {
				reason = strings.TrimSpace(m[1])
			}
		}
	}
	if reason == "" {
		return "(no message)"
	}
	const max = 300
	if len(reason) > max {
		reason = reason[:max] + "..."
	}
	return reason
}

// names lists up to n test names, then how many more there are.
func names(tests []string, n int) string {
	if len(tests) <= n {
		return strings.Join(tests, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(tests[:n], ", "), len(tests)-n)
}

// failedLeaves returns the failed tests none of whose subtests failed: the
// ones whose output says what went wrong.
func failedLeaves(p *pkg) []*test {
	var out []*test
	for _, tn := range p.order {
		t := p.tests[tn]
		if t.action != "fail" {
			continue
		}
		leaf := true
		for _, other := range p.order {
			if strings.HasPrefix(other, tn+"/") && p.tests[other].action == "fail" {
				leaf = false
				break
			}
		}
		if leaf {
			out = append(out, t)
		}
	}
	return out
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

func slowest(w io.Writer, pkgs map[string]*pkg, order []string, top int) {
	ps := make([]*pkg, 0, len(order))
	var tops, groups []*test
	for _, name := range order {
		p := pkgs[name]
		ps = append(ps, p)
		for _, tn := range p.order {
			switch strings.Count(tn, "/") {
			case 0:
				tops = append(tops, p.tests[tn])
			case 1:
				groups = append(groups, p.tests[tn])
			}
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].elapsed > ps[j].elapsed })
	fmt.Fprintf(w, "\n==> slowest packages\n")
	for i, p := range ps {
		if i == top {
			break
		}
		fmt.Fprintf(w, "%8s  %s\n", dur(p.elapsed), p.name)
	}
	for _, list := range []struct {
		title string
		tests []*test
	}{{"slowest tests", tops}, {"slowest subtests (one level down)", groups}} {
		sort.SliceStable(list.tests, func(i, j int) bool { return list.tests[i].elapsed > list.tests[j].elapsed })
		fmt.Fprintf(w, "\n==> %s\n", list.title)
		for i, t := range list.tests {
			if i == top {
				break
			}
			fmt.Fprintf(w, "%8s  %s %s\n", dur(t.elapsed), short(t.pkg), t.name)
		}
	}
}

func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/sqlonce/sqlonce/")
}

func dur(s float64) string {
	return (time.Duration(s*10) * time.Second / 10).String()
}
