// Command apicheck compares the exported API of the repository's published
// modules with the baseline kept in tools/api, using golang.org/x/exp/apidiff.
//
//	go run ./apicheck -root ..            check (exit 1 on an unexplained break)
//	go run ./apicheck -root .. -write     rewrite the baseline from the tree
//
// An incompatible change passes only when the [Unreleased] section of
// CHANGELOG.md names the changed identifier, qualified by its package name
// as a Go reader writes it: `dedupe.Do`, `dedupe.Store.Run` (for the method
// (*Store).Run), `httpidem.Options.Lease` (a field), `sqlonce.ErrConflict`
// (the root package). A removed package is named by its import path.
//
// The baseline holds one file per module (tools/api/<name>.zip) in the
// format `apidiff -m -w` writes: a zip whose entry "module" holds the module
// path and whose entry "<package path>.x" holds each package's export data.
// Internal packages and commands are left out.
package main

import (
	"archive/zip"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// Module is one published module: its directory relative to the
// repository root and the name of its baseline file in tools/api.
type Module struct {
	Dir  string
	Name string
}

// Published are the modules whose API is checked.
var Published = []Module{
	{Dir: ".", Name: "sqlonce"},
	{Dir: "grpcidem", Name: "grpcidem"},
	{Dir: "sqlonceotel", Name: "sqlonceotel"},
}

func main() {
	root := flag.String("root", ".", "repository root")
	baseline := flag.String("baseline", "", "baseline directory (default ROOT/tools/api)")
	changelog := flag.String("changelog", "", "changelog (default ROOT/CHANGELOG.md)")
	write := flag.Bool("write", false, "rewrite the baseline from the current tree")
	flag.Parse()
	if *baseline == "" {
		*baseline = filepath.Join(*root, "tools", "api")
	}
	if *changelog == "" {
		*changelog = filepath.Join(*root, "CHANGELOG.md")
	}
	var err error
	if *write {
		err = WriteBaseline(*root, *baseline, Published)
	} else {
		var ok bool
		ok, err = Check(os.Stdout, *root, *baseline, *changelog, Published)
		if err == nil && !ok {
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

// WriteBaseline loads each module's packages from the tree and writes
// their export data to dir.
func WriteBaseline(root, dir string, mods []Module) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range mods {
		fset := token.NewFileSet()
		mod, err := load(fset, filepath.Join(root, m.Dir))
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := encode(&buf, fset, mod); err != nil {
			return err
		}
		file := filepath.Join(dir, m.Name+".zip")
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %d packages, %d bytes\n", file, len(mod.Packages), buf.Len())
	}
	return nil
}

// Check compares each module's tree with its baseline and reports every
// change to w. It answers false when an incompatible change is not named
// in the changelog's [Unreleased] section.
func Check(w io.Writer, root, dir, changelog string, mods []Module) (bool, error) {
	text, err := os.ReadFile(changelog)
	if err != nil {
		return false, err
	}
	unreleased := Unreleased(string(text))
	ok := true
	for _, m := range mods {
		fset := token.NewFileSet()
		old, err := read(fset, filepath.Join(dir, m.Name+".zip"))
		if err != nil {
			return false, err
		}
		cur, err := load(fset, filepath.Join(root, m.Dir))
		if err != nil {
			return false, err
		}
		for _, c := range Diff(old, cur) {
			switch {
			case c.Compatible:
				fmt.Fprintf(w, "compatible   %s  [%s]\n", c.Name, c.Message)
			case Names(unreleased, c.Name):
				fmt.Fprintf(w, "breaking     %s  [%s] named in [Unreleased]\n", c.Name, c.Message)
			default:
				ok = false
				fmt.Fprintf(w, "UNEXPLAINED  %s  [%s]\n", c.Name, c.Message)
			}
		}
	}
	if !ok {
		fmt.Fprintln(w, "apicheck: incompatible API changes above are not named in CHANGELOG.md's [Unreleased] section;")
		fmt.Fprintln(w, "apicheck: add a line naming each (e.g. `dedupe.Store.Run` -> `dedupe.Store.Do`), see RELEASING.md")
	}
	return ok, nil
}

// A Change is one API difference, named as the changelog must name it.
type Change struct {
	Name       string // e.g. dedupe.Store.Run, or an import path for a package
	Message    string // apidiff's message
	Compatible bool
}

// Diff compares two versions of a module, package by package.
func Diff(old, cur *apidiff.Module) []Change {
	byPath := func(m *apidiff.Module) map[string]*types.Package {
		out := map[string]*types.Package{}
		for _, p := range m.Packages {
			out[strings.TrimPrefix(p.Path(), m.Path)] = p
		}
		return out
	}
	olds, curs := byPath(old), byPath(cur)
	var out []Change
	for rel, op := range olds {
		np, ok := curs[rel]
		if !ok {
			out = append(out, Change{Name: op.Path(), Message: "package removed"})
			continue
		}
		for _, c := range apidiff.Changes(op, np).Changes {
			out = append(out, Change{Name: qualify(op.Name(), c.Message), Message: c.Message, Compatible: c.Compatible})
		}
	}
	for rel, np := range curs {
		if _, ok := olds[rel]; !ok {
			out = append(out, Change{Name: np.Path(), Message: "package added", Compatible: true})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Compatible != out[j].Compatible {
			return !out[i].Compatible
		}
		return out[i].Name+out[i].Message < out[j].Name+out[j].Message
	})
	return out
}

var typeArgs = regexp.MustCompile(`\[[^\]]*\]`)

// qualify turns the object part of an apidiff message ("(*Store[TTx]).Run:
// removed", "Options.Lease: changed from ...", "T, method set of *T: ...")
// into the package-qualified name a changelog uses: "dedupe.Store.Run".
func qualify(pkg, msg string) string {
	name, _, _ := strings.Cut(msg, ": ")
	name, _, _ = strings.Cut(name, ",")
	name = typeArgs.ReplaceAllString(name, "")
	name = strings.NewReplacer("(*", "", "(", "", ")", "").Replace(name)
	return pkg + "." + strings.TrimSpace(name)
}

// Unreleased returns the [Unreleased] section of a Keep a Changelog file:
// the lines after "## [Unreleased]" up to the next "## " heading.
func Unreleased(changelog string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(changelog, "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(strings.ToLower(line), "## [unreleased]")
			continue
		}
		if in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Names reports whether text mentions name as a whole identifier: not as a
// prefix of a longer one (dedupe.Store.Run does not name dedupe.Store.RunSteps)
// nor as the tail of a longer one.
func Names(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		if (start == 0 || !identByte(text[start-1])) && !continues(text[end:]) {
			return true
		}
		i = start + 1
	}
}

// continues reports whether rest, the text after a match, continues the
// identifier: a sentence's closing period does not.
func continues(rest string) bool {
	switch {
	case rest == "":
		return false
	case rest[0] == '.':
		return len(rest) > 1 && identByte(rest[1])
	}
	return identByte(rest[0])
}

func identByte(c byte) bool {
	return c == '_' || c == '.' || c == '/' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// load type-checks the module in dir and returns its public packages:
// neither internal nor commands.
func load(fset *token.FileSet, dir string) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Dir:  dir,
		Fset: fset,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	var errs []error
	mod := &apidiff.Module{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		if p.Module == nil || p.Name == "main" || internal(strings.TrimPrefix(p.PkgPath, p.Module.Path)) {
			continue
		}
		mod.Path = p.Module.Path
		mod.Packages = append(mod.Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %w", dir, errors.Join(errs...))
	}
	if mod.Path == "" {
		return nil, fmt.Errorf("loading %s: no public packages", dir)
	}
	sort.Slice(mod.Packages, func(i, j int) bool { return mod.Packages[i].Path() < mod.Packages[j].Path() })
	return mod, nil
}

func internal(rel string) bool {
	for _, e := range strings.Split(rel, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

// encode writes a module's export data in `apidiff -m -w`'s format.
func encode(w io.Writer, fset *token.FileSet, mod *apidiff.Module) error {
	z := zip.NewWriter(w)
	e, err := z.Create("module")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(e, mod.Path); err != nil {
		return err
	}
	for _, p := range mod.Packages {
		e, err := z.Create(p.Path() + ".x")
		if err != nil {
			return err
		}
		if err := gcexportdata.Write(e, fset, p); err != nil {
			return fmt.Errorf("writing %s: %w", p.Path(), err)
		}
	}
	return z.Close()
}

// read loads a module's baseline written by encode.
func read(fset *token.FileSet, file string) (*apidiff.Module, error) {
	z, err := zip.OpenReader(file)
	if err != nil {
		return nil, fmt.Errorf("%w (make api-baseline writes it)", err)
	}
	defer z.Close()
	mod := &apidiff.Module{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		if f.Name == "module" {
			mod.Path = string(data)
			continue
		}
		pkgPath, ok := strings.CutSuffix(f.Name, ".x")
		if !ok {
			return nil, fmt.Errorf("%s: unexpected entry %q", file, f.Name)
		}
		p, err := gcexportdata.Read(bytes.NewReader(data), fset, map[string]*types.Package{}, pkgPath)
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %w", file, pkgPath, err)
		}
		mod.Packages = append(mod.Packages, p)
	}
	if mod.Path == "" {
		return nil, fmt.Errorf("%s: no module path", file)
	}
	return mod, nil
}
