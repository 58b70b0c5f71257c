package brokers

import "syscall"

// procAttr puts a broker in a process group of its own (a ^C to the test
// does not reach it) and has the kernel kill it when the test process dies
// without stopping it, so that a killed test run leaves no broker behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
