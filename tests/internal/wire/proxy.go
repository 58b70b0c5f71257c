// Package wire is a TCP proxy for tests and benchmarks that sits between a
// client and PostgreSQL or MySQL/MariaDB on loopback: it counts the round
// trips and statements of the traffic through it, and can add a fixed delay
// each way to look like a network.
package wire

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Counts is what one operation cost on the wire.
type Counts struct {
	// RoundTrips is the number of times the client waited for the server:
	// a turn of the byte stream from client to server and back.
	RoundTrips int
	// Statements is the number of statements the server executed: BEGIN
	// and COMMIT included, prepares and statement closes not.
	Statements int
}

// Proxy is a TCP proxy on loopback that counts round trips and statements
// of the connections through it.
//
// A round trip is counted when the server sends bytes on a connection after
// the client sent some since the server last did: one request and its
// answer, however many messages each side wrote in between. Messages that
// need no answer (go-sql-driver/mysql's COM_STMT_CLOSE) count with the
// request that follows them; a pipeline (pgx's batches, BEGIN sent with
// the first statement) counts once. This is what a network's latency
// multiplies.
//
// Statements are read from the client's half of the protocol: on
// PostgreSQL the Query ('Q') and Execute ('E') messages, on MySQL/MariaDB
// the COM_QUERY and COM_STMT_EXECUTE commands.
type Proxy struct {
	ln       net.Listener
	upstream string
	dialect  string
	delay    time.Duration

	roundTrips atomic.Int64
	statements atomic.Int64

	mu sync.Mutex
	// conns are the open connections, both sides; a connection leaves
	// when its forwarding ends.
	conns map[net.Conn]struct{}
	// closed is set by Close: a connection accepted after it is closed at
	// once, and nothing is added to wg.
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on a free loopback port that forwards every
// connection to upstream; dialect is "postgres" or "mysql" (statements
// counted), or anything else (round trips only). delay, if not
// zero, holds every chunk that long before forwarding it, each way: a
// network whose round trip takes twice delay. Close stops it.
func Listen(dialect, upstream string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, dialect: dialect, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is Listen for a test: it fails t on an error and closes the proxy
// when t ends.
func Start(t testing.TB, dialect, upstream string, delay time.Duration) *Proxy {
	t.Helper()
	p, err := Listen(dialect, upstream, delay)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Reset sets the counts to zero.
func (p *Proxy) Reset() {
	p.roundTrips.Store(0)
	p.statements.Store(0)
}

// Counts returns the counts since the last Reset.
func (p *Proxy) Counts() Counts {
	return Counts{RoundTrips: int(p.roundTrips.Load()), Statements: int(p.statements.Load())}
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed { // accepted while Close ran, after it closed the others
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		var pipes atomic.Int32
		pipes.Store(2)
		ended := func() { // the last of the two pipes forgets the connection
			if pipes.Add(-1) == 0 {
				p.mu.Lock()
				delete(p.conns, c)
				delete(p.conns, u)
				p.mu.Unlock()
			}
		}
		st := &connState{}
		var parser frameParser
		switch p.dialect {
		case "postgres":
			parser = &pgParser{startup: true}
		case "mysql":
			parser = &myParser{}
		default:
			parser = noStatements{}
		}
		go p.pipe(u, c, ended, func(b []byte) {
			st.clientSent()
			p.statements.Add(int64(parser.feed(b)))
		})
		go p.pipe(c, u, ended, func([]byte) {
			if st.serverSent() {
				p.roundTrips.Add(1)
			}
		})
	}
}

// pipe copies src to dst, calling seen with each chunk before forwarding it,
// so that a chunk is counted before the other side can answer it, and
// ended when it stops. With a
// delay, a second goroutine writes each chunk when its time has come, so
// that the delay is added once per chunk, not once per chunk queued.
func (p *Proxy) pipe(dst, src net.Conn, ended func(), seen func([]byte)) {
	defer p.wg.Done()
	defer ended()
	defer dst.Close()
	type chunk struct {
		b   []byte
		due time.Time
	}
	var (
		queue chan chunk
		done  chan struct{}
	)
	if p.delay > 0 {
		queue, done = make(chan chunk, 1024), make(chan struct{})
		go func() {
			defer close(done)
			failed := false
			for c := range queue {
				if failed {
					continue
				}
				sleepUntil(c.due)
				if _, err := dst.Write(c.b); err != nil {
					failed = true
					dst.Close()
				}
			}
		}()
		defer func() { close(queue); <-done }()
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(buf[:n])
			if queue != nil {
				queue <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.delay)}
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// connState is one connection's turn: whether the client has sent since the
// server last answered.
type connState struct {
	mu      sync.Mutex
	pending bool
}

func (s *connState) clientSent() {
	s.mu.Lock()
	s.pending = true
	s.mu.Unlock()
}

// serverSent reports whether this chunk of the server's begins an answer.
func (s *connState) serverSent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.pending
	s.pending = false
	return was
}

// noStatements is the parser of a protocol whose statements are not
// counted (Redis, behind a proxy only for its latency).
type noStatements struct{}

func (noStatements) feed([]byte) int { return 0 }

// frameParser reads a client's byte stream and returns how many statements
// a chunk completed the header of.
type frameParser interface {
	feed(b []byte) int
}

// frames splits a stream into messages made of a header of fixed size and
// a body whose length the header gives.
type frames struct {
	hdr       []byte
	skip      int  // body bytes still to skip
	awaitByte bool // the header is complete, its body's first byte not yet read
}

// next feeds b and calls msg with each complete header and the first byte of
// its body (-1 for an empty body); bodyLen tells a header's body length.
func (f *frames) next(b []byte, hdrLen int, bodyLen func(hdr []byte) int, msg func(hdr []byte, first int)) {
	for len(b) > 0 {
		if f.awaitByte {
			f.awaitByte = false
			msg(f.hdr, int(b[0]))
			f.hdr = f.hdr[:0]
			continue // b[0] is the first of the f.skip bytes
		}
		if f.skip > 0 {
			n := min(f.skip, len(b))
			f.skip -= n
			b = b[n:]
			continue
		}
		n := min(hdrLen-len(f.hdr), len(b))
		f.hdr = append(f.hdr, b[:n]...)
		b = b[n:]
		if len(f.hdr) < hdrLen {
			return
		}
		f.skip = bodyLen(f.hdr)
		if f.skip <= 0 {
			f.skip = 0
			msg(f.hdr, -1)
			f.hdr = f.hdr[:0]
			continue
		}
		f.awaitByte = true
	}
}

// pgParser reads PostgreSQL's frontend protocol: an untyped startup message
// (a length, then the body), then messages of a type byte and a length.
type pgParser struct {
	f       frames
	startup bool
}

func (p *pgParser) feed(b []byte) int {
	n := 0
	if p.startup {
		// The startup message carries no type byte: a length, then the
		// body. sslmode=disable sends no SSLRequest before it.
		for len(b) > 0 && p.startup {
			k := min(4-len(p.f.hdr), len(b))
			p.f.hdr = append(p.f.hdr, b[:k]...)
			b = b[k:]
			if len(p.f.hdr) == 4 {
				p.f.skip = int(binary.BigEndian.Uint32(p.f.hdr)) - 4
				p.f.hdr = p.f.hdr[:0]
				p.startup = false
			}
		}
	}
	p.f.next(b, 5, func(h []byte) int { return int(binary.BigEndian.Uint32(h[1:5])) - 4 }, func(h []byte, _ int) {
		if h[0] == 'Q' || h[0] == 'E' {
			n++
		}
	})
	return n
}

// myParser reads the MySQL client protocol: packets of a 3-byte length and a
// sequence number. A command is a packet with sequence number 0; its first
// byte names it.
type myParser struct{ f frames }

const (
	comQuery       = 0x03
	comStmtExecute = 0x17
)

func (p *myParser) feed(b []byte) int {
	n := 0
	p.f.next(b, 4, func(h []byte) int { return int(h[0]) | int(h[1])<<8 | int(h[2])<<16 }, func(h []byte, first int) {
		if h[3] == 0 && (first == comQuery || first == comStmtExecute) {
			n++
		}
	})
	return n
}
