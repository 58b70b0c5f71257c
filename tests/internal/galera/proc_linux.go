package galera

import "syscall"

// procAttr runs mariadbd as the mysql user (uid, gid) in a process group
// of its own (a ^C to the test does not reach it), and has the kernel
// SIGKILL it when the test process dies without Stop (killed, timed out),
// so that a dead test run leaves no node behind.
//
// It starts as mysql rather than as root with --user=mysql: the kernel
// clears the parent-death signal when a process changes its user, as
// mariadbd does when it drops root.
func procAttr(uid, gid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: uid, Gid: gid},
		Pdeathsig:  syscall.SIGKILL,
	}
}
