//go:build !linux

package galera

import "syscall"

// procAttr runs mariadbd as the mysql user (uid, gid) in a process group
// of its own. Outside Linux there is no parent-death signal: Stop ends the
// nodes.
func procAttr(uid, gid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
}
