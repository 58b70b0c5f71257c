package pgbouncer

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel send SIGTERM to the child (runuser, which
// passes it on to pgbouncer) when the test process dies without Stop, so
// that a killed test run leaves no bouncer behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
