package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A module of two packages stands for the repository: its baseline is
// written, an exported function and a method are removed, and the check
// fails until CHANGELOG.md's [Unreleased] section names both.
func TestCheckFailsUntilChangelogNamesTheBreak(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		file := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("m.go", "package m\n\nfunc Keep() {}\n\nfunc Gone() {}\n")
	write("store/store.go", "package store\n\ntype Store[T any] struct{}\n\nfunc (*Store[T]) Run() {}\n\nfunc (*Store[T]) RunSteps() {}\n")
	write("internal/x/x.go", "package x\n\nfunc Hidden() {}\n")
	write("cmd/tool/main.go", "package main\n\nfunc main() {}\n")
	mods := []Module{{Dir: ".", Name: "m"}}
	api := filepath.Join(root, "api")
	if err := WriteBaseline(root, api, mods); err != nil {
		t.Fatal(err)
	}
	changelog := filepath.Join(root, "CHANGELOG.md")
	check := func() (bool, string) {
		t.Helper()
		var out strings.Builder
		ok, err := Check(&out, root, api, changelog, mods)
		if err != nil {
			t.Fatal(err)
		}
		return ok, out.String()
	}

	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-28\n")
	if ok, out := check(); !ok {
		t.Fatalf("unchanged tree fails:\n%s", out)
	}

	// Removing internal and command code is no API change; adding is compatible.
	write("internal/x/x.go", "package x\n")
	write("cmd/tool/main.go", "package main\n\nfunc main() {}\n\nfunc Other() {}\n")
	write("added.go", "package m\n\nfunc Added() {}\n")
	if ok, out := check(); !ok || !strings.Contains(out, "compatible   m.Added") {
		t.Fatalf("compatible changes fail or go unreported:\n%s", out)
	}

	write("m.go", "package m\n\nfunc Keep() {}\n")
	write("store/store.go", "package store\n\ntype Store[T any] struct{}\n\nfunc (*Store[T]) RunSteps() {}\n")
	ok, out := check()
	if ok || !strings.Contains(out, "UNEXPLAINED  m.Gone  [Gone: removed]") || !strings.Contains(out, "UNEXPLAINED  store.Store.Run  [(*Store[T]).Run: removed]") {
		t.Fatalf("removals pass or go unreported:\n%s", out)
	}

	// Named only under a released version, or as part of a longer name: not enough.
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n### Breaking\n- `store.Store.RunSteps` kept.\n\n## [0.1.0] - 2026-11-28\n- `m.Gone` removed.\n")
	if ok, out := check(); ok {
		t.Fatalf("passes with the changes named outside [Unreleased]:\n%s", out)
	}
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n### Breaking\n- `m.Gone` removed: use `m.Keep`.\n- Removed store.Store.Run.\n\n## [0.1.0] - 2026-11-28\n")
	if ok, out := check(); !ok || !strings.Contains(out, "breaking     m.Gone") {
		t.Fatalf("fails with both changes named in [Unreleased]:\n%s", out)
	}

	// A removed package is named by its import path.
	if err := os.RemoveAll(filepath.Join(root, "store")); err != nil {
		t.Fatal(err)
	}
	if ok, out := check(); ok || !strings.Contains(out, "UNEXPLAINED  example.com/m/store  [package removed]") {
		t.Fatalf("a removed package passes:\n%s", out)
	}
}

func TestQualify(t *testing.T) {
	for msg, want := range map[string]string{
		"Gone: removed":                     "p.Gone",
		"(*Store[TTx]).Run: removed":        "p.Store.Run",
		"Store.Run: changed from func() to": "p.Store.Run",
		"Options.Lease: removed":            "p.Options.Lease",
		"T, method set of *T: removed M":    "p.T",
	} {
		if got := qualify("p", msg); got != want {
			t.Errorf("qualify(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	text := "- `dedupe.Store.Complete` -> `dedupe.Lease.Release`; removed sqlonce.ErrX.\n"
	for name, want := range map[string]bool{
		"dedupe.Store.Complete": true,
		"dedupe.Store":          false, // only as part of a longer name
		"dedupe.Lease.Release":  true,
		"sqlonce.ErrX":          true,  // before a sentence's period
		"Store.Complete":        false, // unqualified tail
		"dedupe.Store.Comp":     false, // prefix
	} {
		if got := Names(text, name); got != want {
			t.Errorf("Names(%q) = %v, want %v", name, got, want)
		}
	}
}

// The same on a copy of the repository's root module: its real packages
// (generics, pgx and database/sql types) survive the baseline's round trip
// with no change reported, and removing an exported function fails the
// check until CHANGELOG.md names it.
func TestCheckOnACopyOfTheRootModule(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the root module twice")
	}
	root := t.TempDir()
	copyModule(t, filepath.Join("..", ".."), root)
	probe := filepath.Join(root, "zz_apicheck_probe.go")
	if err := os.WriteFile(probe, []byte("package sqlonce\n\n// APICheckProbe is removed by the test.\nfunc APICheckProbe() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mods := []Module{{Dir: ".", Name: "sqlonce"}}
	api := filepath.Join(root, "api")
	if err := WriteBaseline(root, api, mods); err != nil {
		t.Fatal(err)
	}
	changelog := filepath.Join(root, "CHANGELOG.md")
	check := func() (bool, string) {
		t.Helper()
		var out strings.Builder
		ok, err := Check(&out, root, api, changelog, mods)
		if err != nil {
			t.Fatal(err)
		}
		return ok, out.String()
	}
	if ok, out := check(); !ok || out != "" {
		t.Fatalf("the unchanged root module reports changes:\n%s", out)
	}
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	if ok, out := check(); ok || !strings.Contains(out, "UNEXPLAINED  sqlonce.APICheckProbe") {
		t.Fatalf("removing an exported function passes:\n%s", out)
	}
	text, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	named := strings.Replace(string(text), "## [Unreleased]\n", "## [Unreleased]\n\n- `sqlonce.APICheckProbe` removed.\n", 1)
	if named == string(text) {
		t.Fatal("CHANGELOG.md has no \"## [Unreleased]\" line")
	}
	if err := os.WriteFile(changelog, []byte(named), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, out := check(); !ok {
		t.Fatalf("fails with the removal named in CHANGELOG.md:\n%s", out)
	}
}

// copyModule copies the module at src to dst: no nested module, no .git,
// no file over 1 MB (a stray binary).
func copyModule(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel != "." {
				if d.Name() == ".git" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() || info.Size() > 1<<20 {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
