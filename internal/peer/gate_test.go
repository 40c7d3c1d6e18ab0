package peer

import (
	"net"
	"testing"
)

// fakeConn is a connection from an address that records its Close.
type fakeConn struct {
	net.Conn
	addr   *net.TCPAddr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func from(ip string) *fakeConn { return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}} }

// A stranger's silent connections make room for a client's, of their own
// address first; connections held (a ClientHello in, a request served)
// are never evicted, and with every one held a new connection is refused.
func TestGate(t *testing.T) {
	g := newGate(4, 2)
	a1, a2, a3 := from("192.0.2.1"), from("192.0.2.1"), from("192.0.2.1")
	e1, _ := g.enter(a1)
	g.enter(a2)
	// The address is at its bound: its oldest silent connection goes.
	if e, evicted := g.enter(a3); e == nil || !evicted || !a1.closed || a2.closed {
		t.Fatalf("third connection of one address: %v %v, first closed %v, second %v", e, evicted, a1.closed, a2.closed)
	}
	if !g.leave(e1) {
		t.Error("leave of an evicted connection: not reported as evicted")
	}
	// Another address fills the total; a third address evicts from the
	// busiest one.
	b1, b2 := from("198.51.100.1"), from("198.51.100.1")
	eb1, _ := g.enter(b1)
	eb2, _ := g.enter(b2)
	g.hold(eb1, true)
	g.hold(eb2, true)
	c := from("203.0.113.1")
	if e, evicted := g.enter(c); e == nil || !evicted || !a2.closed || b1.closed || b2.closed {
		t.Fatalf("a third address with the total reached: %v %v; a2 %v b1 %v b2 %v", e, evicted, a2.closed, b1.closed, b2.closed)
	}
	// IPv6 addresses of one /64 share a bucket.
	if addrKey(&net.TCPAddr{IP: net.ParseIP("2001:db8::1")}) != addrKey(&net.TCPAddr{IP: net.ParseIP("2001:db8::ffff:1")}) {
		t.Error("two addresses of one /64 in different buckets")
	}
	// Every connection held: the new one is refused, none closed.
	g2 := newGate(2, 2)
	h1, h2 := from("192.0.2.9"), from("192.0.2.9")
	x1, _ := g2.enter(h1)
	x2, _ := g2.enter(h2)
	g2.hold(x1, true)
	g2.hold(x2, true)
	if e, evicted := g2.enter(from("192.0.2.9")); e != nil || evicted || h1.closed || h2.closed {
		t.Errorf("every connection held: admitted %v, evicted %v", e, evicted)
	}
	if g2.leave(x1) {
		t.Error("leave of a connection not evicted: reported as evicted")
	}
	if e, _ := g2.enter(from("192.0.2.9")); e == nil {
		t.Error("no room after a connection left")
	}
}
