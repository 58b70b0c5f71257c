//go:build !linux

package brokers

import "syscall"

// procAttr puts a broker in a process group of its own; outside Linux a
// test process that dies leaves it running.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
