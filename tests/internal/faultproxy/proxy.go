// Package faultproxy is a TCP proxy between a test's connection pool and a
// real PostgreSQL or MySQL/MariaDB server that breaks single connections at
// the moment that matters: COMMIT.
//
// It reads the protocol just enough for that: the server's id of each
// connection from the handshake (PostgreSQL's BackendKeyData, the MySQL
// handshake's connection id), so that a test can name a connection by what
// pg_backend_pid() or CONNECTION_ID() return in its transaction, and the
// messages that carry COMMIT (a simple query "commit", or a prepared
// statement of it bound in a pipeline; a COM_QUERY "COMMIT"). Everything
// else passes through untouched.
//
// Faults are armed per connection (Arm, at its next COMMIT), for the next
// COMMIT on any connection (ArmNext), or fired now (Blackhole): the reply
// to COMMIT lost (the server committed, the client sees its connection
// reset), the COMMIT lost (never reaches the server, which rolls back when
// the connection closes), and half-open connections:
// the proxy stops forwarding without closing, the client gives up (its
// context deadline, or the reset the proxy sends after a while), and only
// then does the server side end, with the held bytes, COMMIT included,
// delivered behind the client's back or dropped.
//
// Shopify's toxiproxy resets connections too, but not at a protocol
// message: a reset "at COMMIT" needs to know where COMMIT is.
package faultproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Dialect selects the wire protocol.
type Dialect int

const (
	Postgres Dialect = iota
	MySQL
)

// Fault is what happens to a connection.
type Fault int

const (
	// None passes everything through.
	None Fault = iota
	// LoseReply forwards COMMIT, waits for the server's answer, drops it
	// and resets the client's connection: the server committed, the
	// client cannot know.
	LoseReply
	// LoseCommit ends the server's connection instead of forwarding
	// COMMIT and, once the server has closed it (it rolled back), resets
	// the client's: a resend after the reset finds the transaction gone.
	LoseCommit
	// HalfOpenDeliver stops forwarding at COMMIT, both ways, without
	// closing either side. After the hold the client's side is reset,
	// then the held COMMIT reaches the server, which commits behind the
	// back of a client that gave up.
	HalfOpenDeliver
	// HalfOpenDrop is HalfOpenDeliver whose held bytes are dropped: the
	// server's side is closed, and it rolls back, only after the hold.
	HalfOpenDrop
)

func (f Fault) String() string {
	return [...]string{"none", "reply to COMMIT lost", "COMMIT lost", "half-open, COMMIT delivered late", "half-open, dropped"}[f]
}

// Counts says what the proxy did.
type Counts struct {
	Conns    int64 // connections accepted
	Commits  int64 // COMMITs seen
	Fired    [5]int64
	Unarmed  int64 // Arm or Blackhole calls for a connection the proxy does not know
	Timeouts int64 // a server answer (or close) awaited after a fault did not come
}

// Proxy forwards connections from Addr to a server.
type Proxy struct {
	t       testing.TB
	dialect Dialect
	target  string
	ln      net.Listener
	hold    time.Duration
	// also matches statements that count as COMMIT too (CommitsAlso).
	also func(stmt string) bool
	// next is the fault for the next COMMIT on any connection (ArmNext).
	next atomic.Int32

	mu    sync.Mutex
	conns map[int64]*conn // by server connection id
	all   map[*conn]bool
	fired map[int64]Fault // the last fault fired on each connection id
	// closed is set by Close; nothing is added to wg after it.
	closed bool
	// done is closed by Close: goroutines waiting out a hold or an answer
	// end at once instead of acting after the test.
	done chan struct{}
	wg   sync.WaitGroup

	conns64, commits, unarmed, timeouts atomic.Int64
	firedN                              [5]atomic.Int64
}

// Option configures a Proxy.
type Option func(*Proxy)

// CommitsAlso makes the statements match reports true for count as COMMIT
// too: a statement that commits by itself in autocommit, whose loss
// matters as a COMMIT's does. match gets the statement's text.
func CommitsAlso(match func(stmt string) bool) Option {
	return func(p *Proxy) { p.also = match }
}

// Start listens on a free loopback port and forwards to target
// ("host:port"); it stops when t ends. hold is how long a half-open
// connection stays open before the proxy resets the client's side.
func Start(t testing.TB, d Dialect, target string, hold time.Duration, opts ...Option) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{t: t, dialect: d, target: target, ln: ln, hold: hold, conns: map[int64]*conn{}, all: map[*conn]bool{}, fired: map[int64]Fault{}, done: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, ends every connection and waits for every
// goroutine of the proxy: nothing reaches the server after it returns.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	all := make([]*conn, 0, len(p.all))
	for c := range p.all {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.closeBoth(false)
	}
	p.wg.Wait()
}

// Counts returns what the proxy did so far.
func (p *Proxy) Counts() Counts {
	c := Counts{Conns: p.conns64.Load(), Commits: p.commits.Load(), Unarmed: p.unarmed.Load(), Timeouts: p.timeouts.Load()}
	for i := range c.Fired {
		c.Fired[i] = p.firedN[i].Load()
	}
	return c
}

// Arm sets the fault for the next COMMIT on the connection with server id
// id; a ROLLBACK clears it, so that a transaction that ends without COMMIT
// leaves no fault to the next one on the pooled connection. It reports
// false when the proxy does not carry that connection.
func (p *Proxy) Arm(id int64, f Fault) bool {
	c := p.lookup(id)
	if c == nil {
		return false
	}
	c.mu.Lock()
	c.armed = f
	c.mu.Unlock()
	return true
}

// ArmNext sets the fault for the next COMMIT on any connection that has
// no fault of its own armed; it fires once. Unlike Arm, a ROLLBACK does
// not clear it.
func (p *Proxy) ArmNext(f Fault) { p.next.Store(int32(f)) }

// Disarm clears an armed fault that did not fire.
func (p *Proxy) Disarm(id int64) {
	p.mu.Lock()
	c := p.conns[id]
	p.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.armed = None
		c.mu.Unlock()
	}
}

// Blackhole makes the connection with server id id half-open now: nothing
// more is forwarded either way; after the hold the client's side is reset
// and the server's side gets the held bytes (deliver) or is closed.
func (p *Proxy) Blackhole(id int64, deliver bool) bool {
	c := p.lookup(id)
	if c == nil {
		return false
	}
	f := HalfOpenDrop
	if deliver {
		f = HalfOpenDeliver
	}
	c.mu.Lock()
	if c.faulted {
		c.mu.Unlock()
		return false
	}
	c.faulted, c.blackholed, c.fault = true, true, f
	c.mu.Unlock()
	p.noteFired(id, f)
	if !p.goTracked(c.endHalfOpen) {
		c.closeBoth(false)
	}
	return true
}

// FiredOn reports whether a fault fired on the connection with server id
// id (the last one with that id), and forgets it.
func (p *Proxy) FiredOn(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.fired[id]
	delete(p.fired, id)
	return ok
}

func (p *Proxy) noteFired(id int64, f Fault) {
	p.firedN[f].Add(1)
	p.mu.Lock()
	p.fired[id] = f
	p.mu.Unlock()
}

// goTracked runs f in a goroutine that Close waits for; it reports false,
// running nothing, once Close has begun.
func (p *Proxy) goTracked(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); f() }()
	return true
}

func (p *Proxy) lookup(id int64) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[id]
	if c == nil {
		p.unarmed.Add(1)
	}
	return c
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			return
		}
		sv, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = cl.Close()
			continue
		}
		p.conns64.Add(1)
		c := &conn{p: p, client: cl, server: sv, replied: make(chan struct{}, 1), serverDone: make(chan struct{})}
		p.mu.Lock()
		if p.closed { // accepted while Close ran: it would never be closed
			p.mu.Unlock()
			_ = cl.Close()
			_ = sv.Close()
			return
		}
		p.all[c] = true
		p.wg.Add(2)
		p.mu.Unlock()
		go func() { defer p.wg.Done(); c.fromClient() }()
		go func() { defer p.wg.Done(); c.fromServer() }()
	}
}

// conn is one proxied connection.
type conn struct {
	p              *Proxy
	client, server net.Conn

	mu         sync.Mutex
	id         int64
	armed      Fault
	faulted    bool  // a fault fired: the connection ends with it
	fault      Fault // the fault that fired
	blackholed bool  // nothing is forwarded any more
	swallow    bool  // server bytes are dropped (LoseReply)
	held       []byte
	// outstanding counts the requests whose answers have not come back
	// (PostgreSQL: Query and Sync messages against ReadyForQuery; MySQL:
	// commands against first packets of an answer).
	outstanding int
	replied     chan struct{} // signalled when outstanding drops to 0 while swallowing
	serverDone  chan struct{} // closed when the server's side ends
	closed      bool
}

// disarm clears the armed fault: the transaction it was for rolled back.
func (c *conn) disarm() {
	c.mu.Lock()
	c.armed = None
	c.mu.Unlock()
}

func (c *conn) setID(id int64) {
	c.mu.Lock()
	c.id = id
	c.mu.Unlock()
	c.p.mu.Lock()
	c.p.conns[id] = c
	c.p.mu.Unlock()
}

// closeBoth ends the connection: the client's side reset (RST, as a
// network failure looks) when reset, closed otherwise.
func (c *conn) closeBoth(reset bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	// The client's side of a lost COMMIT is reset even when the server's
	// end of the connection is what ends it first.
	reset = reset || (c.faulted && c.fault == LoseCommit)
	c.mu.Unlock()
	if reset {
		resetConn(c.client)
	} else {
		_ = c.client.Close()
	}
	_ = c.server.Close()
	c.p.mu.Lock()
	delete(c.p.all, c)
	if c.p.conns[c.id] == c {
		delete(c.p.conns, c.id)
	}
	c.p.mu.Unlock()
}

func resetConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

// fromClient forwards the client's messages, message by message, and
// fires an armed fault at COMMIT.
func (c *conn) fromClient() {
	defer c.closeBoth(false)
	r := &reader{r: c.client}
	// Its errors end the connection; cut connections are the point.
	switch c.p.dialect {
	case Postgres:
		_ = c.pgClient(r)
	case MySQL:
		_ = c.myClient(r)
	}
}

// fromServer forwards the server's bytes, learning the connection id and
// counting answers on the way.
func (c *conn) fromServer() {
	defer c.closeBoth(false)
	defer close(c.serverDone)
	r := &reader{r: c.server}
	switch c.p.dialect {
	case Postgres:
		_ = c.pgServer(r)
	case MySQL:
		_ = c.myServer(r)
	}
}

// forward writes a client message to the server unless the connection is
// blackholed (then it is held).
func (c *conn) forward(msg []byte) error {
	c.mu.Lock()
	if c.blackholed {
		c.held = append(c.held, msg...)
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	_, err := c.server.Write(msg)
	return err
}

// toClient writes a server message to the client unless it is swallowed
// or blackholed.
func (c *conn) toClient(msg []byte) error {
	c.mu.Lock()
	drop := c.swallow || c.blackholed
	c.mu.Unlock()
	if drop {
		return nil
	}
	_, err := c.client.Write(msg)
	return err
}

// request counts a request whose answer the server will send.
func (c *conn) request() {
	c.mu.Lock()
	c.outstanding++
	c.mu.Unlock()
}

// answered counts an answer; while a fault waits for the server's answer
// to COMMIT, the last one signals it.
func (c *conn) answered() {
	c.mu.Lock()
	if c.outstanding > 0 {
		c.outstanding--
	}
	done := c.outstanding == 0 && c.faulted
	c.mu.Unlock()
	if done {
		select {
		case c.replied <- struct{}{}:
		default:
		}
	}
}

// atCommit is called with the messages that make the server run COMMIT,
// and the number of answers they ask for, before they are forwarded. With
// no fault armed it counts the answers and returns false: the caller
// forwards them. Else the fault takes the connection over and ends it.
func (c *conn) atCommit(msgs []byte, answers int) (done bool, err error) {
	c.p.commits.Add(1)
	c.mu.Lock()
	f := c.armed
	if f == None && !c.faulted {
		f = Fault(c.p.next.Swap(int32(None)))
	}
	if f == None || c.faulted {
		c.outstanding += answers
		c.mu.Unlock()
		return false, nil
	}
	c.armed, c.faulted, c.fault = None, true, f
	switch f {
	case LoseReply:
		c.swallow = true
		c.outstanding += answers
	case HalfOpenDeliver, HalfOpenDrop:
		c.blackholed = true
		c.held = append(c.held, msgs...)
		c.outstanding += answers
	}
	c.mu.Unlock()
	c.p.noteFired(c.id, f)
	switch f {
	case LoseCommit:
		c.endServerFirst()
	case LoseReply:
		if _, err = c.server.Write(msgs); err == nil {
			c.waitAnswer()
		}
		c.closeBoth(true)
	default:
		c.endHalfOpen()
	}
	return true, err
}

// endServerFirst ends the server's side (FIN), waits a while for the
// server to close it, which it does once it has rolled back the
// transaction (PostgreSQL ends the backend; MariaDB ends the connection's
// thread), and then resets the client's side: a client that resends at
// once does not find the dead transaction still holding its locks.
func (c *conn) endServerFirst() {
	if tc, ok := c.server.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case <-c.serverDone:
	case <-time.After(10 * time.Second):
		c.p.timeouts.Add(1)
	case <-c.p.done:
	}
	c.closeBoth(true)
}

// waitAnswer waits for the server to answer everything forwarded, or a
// while.
func (c *conn) waitAnswer() {
	c.mu.Lock()
	n := c.outstanding
	c.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case <-c.replied:
	case <-time.After(10 * time.Second):
		c.p.timeouts.Add(1)
	case <-c.p.done:
	}
}

// endHalfOpen waits out the hold, resets the client's side, and then
// delivers or drops what the client sent meanwhile. When the proxy closes
// during the hold, the held bytes are dropped: nothing is delivered after
// the test.
func (c *conn) endHalfOpen() {
	hold := time.NewTimer(c.p.hold)
	defer hold.Stop()
	select {
	case <-hold.C:
	case <-c.p.done:
		c.closeBoth(true)
		return
	}
	resetConn(c.client)
	c.mu.Lock()
	held, deliver := c.held, c.fault == HalfOpenDeliver
	c.held = nil
	c.mu.Unlock()
	select {
	case <-c.p.done:
		deliver = false // closed while the hold ended
	default:
	}
	if deliver && len(held) > 0 {
		if _, err := c.server.Write(held); err == nil {
			c.waitAnswer()
		}
	}
	c.closeBoth(true)
}

// isCommit reports whether the statement q commits: COMMIT, or what
// CommitsAlso matches.
func (c *conn) isCommit(q string) bool {
	return isCommit(q) || (c.p.also != nil && c.p.also(q))
}

// reader reads exact byte counts.
type reader struct{ r io.Reader }

func (r *reader) n(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(r.r, b)
	return b, err
}

func errf(format string, args ...any) error { return fmt.Errorf("faultproxy: "+format, args...) }
