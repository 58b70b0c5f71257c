// Package ports hands out loopback ports for the servers tests start as
// child processes (PgBouncer, Galera nodes, throwaway PostgreSQL and
// MariaDB servers).
//
// A port the kernel picks for ":0" comes from the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768–60999 by default), the
// same range every outgoing connection takes its local port from. Between
// closing such a listener and the child binding the port, any connection
// the test processes open (test packages run side by side) may take it,
// and the child fails to start — seen with a Galera node's state transfer
// port on restart. Ports here come from below that range, at random, and
// are checked free by binding them; a port is handed out once per process.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

const (
	low  = 10000
	high = 32000 // below the kernel's default ephemeral range
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Free returns n distinct loopback ports that were free when checked and
// lie outside the ephemeral range.
func Free(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	var out []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("ports: no free loopback port in %d–%d after %d tries", low, high, tries)
		}
		p := low + rand.IntN(high-low)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		held = append(held, l)
		issued[p] = true
		out = append(out, p)
	}
	return out, nil
}

// One is Free(1).
func One() (int, error) {
	p, err := Free(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Run returns the first of n consecutive loopback ports that were all free
// when checked and lie outside the ephemeral range, for a server that
// derives its ports from one base (vttestserver: base to base+n-1).
func Run(n int) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for tries := 0; tries < 1000; tries++ {
		base := low + rand.IntN(high-low-n)
		var held []net.Listener
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			ok = err == nil && !issued[p]
			if err == nil {
				held = append(held, l)
			}
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			for p := base; p < base+n; p++ {
				issued[p] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("ports: no %d consecutive free loopback ports in %d–%d", n, low, high)
}
