//go:build !linux

package pgbouncer

import "os/exec"

// dieWithParent does nothing outside Linux: Stop ends the bouncer.
func dieWithParent(*exec.Cmd) {}
