// Command modproxy writes the repository's published modules, at one
// version, into a directory laid out as a Go module proxy (the layout
// GOPROXY=file://DIR reads), so that a consumer module can `go get` them
// as it would from the public proxy once they are tagged.
//
//	go run ./modproxy -root .. -version v0.1.0 -out /tmp/proxy
//
// Each module's zip is made from a git revision (-rev, HEAD by default,
// through git archive),
// as a tag would publish it: uncommitted changes are not in it. Nested
// modules (tests/, tools/) are left out of their parent's zip by the zip
// format itself. A go.mod's replace directives travel in the zip but, as
// for any dependency, a consumer's build ignores them.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// modules are the published modules, by directory relative to the
// repository root.
var modules = []string{".", "grpcidem", "sqlonceotel"}

func main() {
	root := flag.String("root", ".", "repository root")
	version := flag.String("version", "v0.1.0", "version to publish the modules at")
	rev := flag.String("rev", "HEAD", "git revision the zips are made from")
	out := flag.String("out", "", "proxy directory to write (required)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "modproxy: -out is required")
		os.Exit(2)
	}
	if err := write(*root, *rev, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func write(root, rev, version, out string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	when, err := git(root, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return err
	}
	// The tree at rev, extracted from git: what a tag publishes, and it
	// works in a linked worktree, where zip.CreateFromVCS finds no .git
	// directory.
	tree, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	archive := exec.Command("sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", rev, tree)
	archive.Dir = root
	if msg, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", rev, err, msg)
	}
	for _, dir := range modules {
		subdir := ""
		if dir != "." {
			subdir = dir
		}
		gomod, err := git(root, "show", rev+":"+path.Join(subdir, "go.mod"))
		if err != nil {
			return err
		}
		modPath := modfile.ModulePath(gomod)
		if modPath == "" {
			return fmt.Errorf("%s/go.mod: no module path", dir)
		}
		mv := module.Version{Path: modPath, Version: version}
		if err := module.Check(mv.Path, mv.Version); err != nil {
			return err
		}
		esc, err := module.EscapePath(modPath)
		if err != nil {
			return err
		}
		vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := zip.CreateFromDir(&buf, mv, filepath.Join(tree, dir)); err != nil {
			return fmt.Errorf("%s: %w", modPath, err)
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, t.UTC()})
		if err != nil {
			return err
		}
		files := map[string][]byte{
			version + ".zip":  buf.Bytes(),
			version + ".mod":  gomod,
			version + ".info": info,
			"list":            []byte(version + "\n"),
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("%s@%s: %d bytes\n", modPath, version, buf.Len())
	}
	return nil
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
