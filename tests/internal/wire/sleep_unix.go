//go:build unix

package wire

import (
	"runtime"
	"syscall"
	"time"
)

// spin is how much of a delay sleepUntil waits out awake: about what the
// kernel overshoots a nanosleep by on a virtual machine.
const spin = 150 * time.Microsecond

// sleepUntil returns at due, within a few microseconds. time.Sleep cannot:
// the Go runtime's timers fire about a millisecond late on some virtual
// machines (measured: a 250µs Sleep took 1.1 ms), which would turn the
// LAN the -latency view means to show (0.5 ms round trips) into a 2 ms
// one. The thread sleeps in the kernel for all but the last spin, then
// yields until due.
func sleepUntil(due time.Time) {
	if d := time.Until(due) - spin; d > 0 {
		ts := syscall.NsecToTimespec(int64(d))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
	}
	for time.Now().Before(due) {
		runtime.Gosched()
	}
}
