// Command testreport reads the files `go test -json` wrote (one per module,
// as tests/run runs them) and prints what a person needs at the end of a
// run: one line per package with its result and time, the output of every
// failed test, the failures that belong to no test (a build error, a panic,
// a timeout), and the slowest packages and tests, so that the next
// regression in speed is seen in the run that makes it. It exits 1 when
// anything failed or a package has no result.
//
//	go run ./internal/testreport [-top N] FILE...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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
	flag.Parse()
	pkgs := map[string]*pkg{}
	var order []string
	get := func(name string) *pkg {
		p := pkgs[name]
		if p == nil {
			p = &pkg{name: name, tests: map[string]*test{}}
			pkgs[name] = p
			order = append(order, name)
		}
		return p
	}
	var bad []string
	for _, file := range flag.Args() {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var e event
			if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
				// go test prints build errors as plain text beside the JSON.
				bad = append(bad, file+": "+string(line))
				continue
			}
			if e.Package == "" && e.ImportPath != "" {
				e.Package = e.ImportPath // build-output and build-fail events
			}
			if e.Package == "" {
				continue
			}
			p := get(e.Package)
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
			bad = append(bad, fmt.Sprintf("%s: %v", file, err))
		}
		f.Close()
	}
	os.Exit(report(os.Stdout, pkgs, order, bad, *top))
}

func report(w io.Writer, pkgs map[string]*pkg, order []string, bad []string, top int) int {
	failed := 0
	var passed, skipped, failedTests int
	fmt.Fprintln(w, "==> packages")
	for _, name := range order {
		p := pkgs[name]
		status := p.action
		if status == "" {
			status = "NO RESULT"
			failed++
		} else if status == "fail" {
			status = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%-5s %7.1fs  %s\n", status, p.elapsed, name)
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
	for _, name := range order {
		p := pkgs[name]
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
	if len(bad) > 0 {
		fmt.Fprintf(w, "\n==> lines that are not test events:\n%s\n", strings.Join(bad, "\n"))
	}
	slowest(w, pkgs, order, top)
	fmt.Fprintf(w, "\n==> %d tests passed, %d failed, %d skipped, %d packages, %d failed\n",
		passed, failedTests, skipped, len(order), failed)
	if failed > 0 || failedTests > 0 {
		return 1
	}
	return 0
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
