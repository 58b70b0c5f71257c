package wire

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// A proxy with a delay must look like the network it claims: a round trip
// through it takes at least twice the delay, and every round trip is
// counted. How far it overshoots (a median of ~0.6 ms for a 250µs delay on
// a quiet machine, against the 2.2 ms time.Sleep gave) is logged, not
// asserted: on a loaded machine the scheduler alone adds milliseconds (a
// median of 3 ms was seen while CI ran), and a bound on time would fail
// for the load, not for the proxy. cmd/bench -latency reports each
// path's latency through the proxy beside the bare transaction's.
func TestDelayIsTheNetworksRoundTrip(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const delay = 250 * time.Microsecond
	p := Start(t, "", echo.Addr().String(), delay)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1)
	var rtts []time.Duration
	for range 101 {
		t0 := time.Now()
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	median := rtts[len(rtts)/2]
	t.Logf("round trip through a %v proxy: median %v, min %v, max %v", delay, median, rtts[0], rtts[len(rtts)-1])
	if median < 2*delay {
		t.Errorf("median round trip %v, below the %v the delay adds", median, 2*delay)
	}
	if got := p.Counts().RoundTrips; got != len(rtts) {
		t.Errorf("%d round trips counted, want %d", got, len(rtts))
	}
}
