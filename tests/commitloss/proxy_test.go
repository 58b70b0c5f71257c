package commitloss

import (
	"bytes"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cutProxy is a TCP proxy in front of a real server that cuts the
// client's connection at the first COMMIT after it is armed.
//
// With forward set it sends the COMMIT on to the server, waits for the
// server's answer (the transaction has committed) and closes the
// client's connection instead of passing that answer on; without it, it
// closes both connections before the server sees the COMMIT (the server
// rolls the transaction back). Either way the client's COMMIT fails with
// a lost connection and cannot tell which happened.
type cutProxy struct {
	ln      net.Listener
	target  string
	forward bool
	// isCommit reports whether a chunk the client sent holds a COMMIT.
	isCommit func(chunk []byte) bool
	armed    atomic.Bool
	cuts     atomic.Int32
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, target string, forward bool, isCommit func([]byte) bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, forward: forward, isCommit: isCommit}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		conns.Go(func() { p.serve(c) })
	}
}

func (p *cutProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			server.Close()
		})
	}
	defer closeBoth()
	// swallow: the COMMIT went to the server; its answer closes both
	// connections instead of reaching the client.
	var swallow atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && swallow.Load() {
				return
			}
			if n > 0 {
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if p.isCommit(chunk) && p.armed.CompareAndSwap(true, false) {
				p.cuts.Add(1)
				if p.forward {
					swallow.Store(true)
					_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, err := server.Write(chunk); err == nil {
						<-done // the server answered: it has committed
					}
				}
				return
			}
			if _, err := server.Write(chunk); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	closeBoth()
	<-done
}

// pgCommit matches COMMIT in PostgreSQL's wire protocol: the statement
// text, NUL-terminated, right after a Query message's length or a Parse
// message's empty statement name ("read committed" in a BEGIN is not
// followed by a NUL, and a parameter's bytes are not preceded by one).
var pgCommit = regexp.MustCompile(`(?i)[\x00-\x1f]commit\x00`).Match

// mysqlCommit matches go-sql-driver/mysql's COMMIT: a COM_QUERY packet
// (command byte 3) whose text is COMMIT, ending the packet.
func mysqlCommit(chunk []byte) bool {
	return bytes.HasSuffix(chunk, []byte("\x03COMMIT"))
}
