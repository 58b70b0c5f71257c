package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// modulePath is the module the command belongs to.
const modulePath = "github.com/sqlonce/sqlonce"

func versionCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	pos, err := flags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cmdUsagef("version", "version takes no arguments, got %q", pos)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintf(stdout, "sqlonce (unknown: built without module support)\ngo      %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	}
	fmt.Fprint(stdout, versionText(bi))
	return nil
}

// versionText says which sqlonce the binary holds: the module's version
// ("go install .../cmd/sqlonce@v0.1.0" gives v0.1.0, a build in a checkout
// a pseudo-version or "(devel)"), the commit it was built from when the
// build recorded one, and the Go that built it.
//
//	sqlonce v0.1.0
//	commit  f2c97dd1e4a3... (2026-11-28T14:00:00Z, with uncommitted changes)
//	go      go1.26.8 linux/amd64
func versionText(bi *debug.BuildInfo) string {
	// The module holding this command: the main module, or a dependency
	// of another main module (a tools.go).
	m := &bi.Main
	if m.Path != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				m = d
			}
		}
	}
	version := m.Version
	// The commit recorded is the main module's: sqlonce's own only when
	// sqlonce is the main module or a directory replaces it (a checkout).
	ownCommit := m == &bi.Main
	if r := m.Replace; r != nil {
		version = r.Version
		if version == "" || version == "(devel)" {
			// Replaced by a directory: a checkout, whatever go.mod requires.
			version = "(devel), from " + r.Path
			ownCommit = true
		}
	}
	if version == "" {
		version = "(devel)"
	}
	s := "sqlonce " + version + "\n"
	var rev, at string
	modified := false
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			modified = kv.Value == "true"
		}
	}
	if rev != "" && ownCommit {
		s += "commit  " + rev
		if at != "" || modified {
			s += " ("
			if at != "" {
				s += at
			}
			if modified {
				if at != "" {
					s += ", "
				}
				s += "with uncommitted changes"
			}
			s += ")"
		}
		s += "\n"
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return s + fmt.Sprintf("go      %s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
}
