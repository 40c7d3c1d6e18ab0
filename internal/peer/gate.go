package peer

import (
	"net"
	"net/netip"
	"sync"
)

// gate bounds the connections of a TCP listener that are not yet (or not
// now) doing anything for a known client: TLS handshakes in progress, or
// metrics connections between requests. At most perAddr are open per
// source address (an IPv4 address, or an IPv6 /64) and total in all.
// Beyond either bound, the oldest connection that is not held (one whose
// ClientHello has not arrived, one not serving a request) is closed to
// make room: of the new connection's address when that address is at its
// bound, else of the address that has the most. A client that speaks at
// once is held within a round trip, so that a stranger's idle or
// half-sent connections, however many and from however many addresses,
// cannot keep it out: a stranger's address loses its own silent
// connections first. When every connection is held, the new one is
// refused.
type gate struct {
	perAddr, total int

	mu     sync.Mutex
	live   []*entry // in order of arrival
	byAddr map[netip.Prefix]int
}

// entry is one connection in a gate.
type entry struct {
	c    net.Conn
	key  netip.Prefix
	held bool // not to be evicted
	gone bool // left, or evicted
}

func newGate(total, perAddr int) *gate {
	return &gate{perAddr: perAddr, total: total, byAddr: map[netip.Prefix]int{}}
}

// addrKey is the bucket of a connection's source address: the IPv4
// address, or the IPv6 /64 (one host holds a whole /64 as easily as one
// address). A connection of no IP address shares one bucket.
func addrKey(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// enter admits c. It returns nil when there is no room and no connection
// to evict (c is the caller's to refuse), and evicted when another
// connection was closed to make room.
func (g *gate) enter(c net.Conn) (e *entry, evicted bool) {
	key := addrKey(c.RemoteAddr())
	g.mu.Lock()
	var victim *entry
	switch {
	case g.byAddr[key] >= g.perAddr:
		victim = g.oldestFree(key, true)
	case len(g.live) >= g.total:
		victim = g.oldestFree(g.busiest(), true)
		if victim == nil {
			victim = g.oldestFree(netip.Prefix{}, false)
		}
	}
	full := g.byAddr[key] >= g.perAddr || len(g.live) >= g.total
	if full && victim == nil {
		g.mu.Unlock()
		return nil, false
	}
	if victim != nil {
		g.remove(victim)
	}
	e = &entry{c: c, key: key}
	g.live = append(g.live, e)
	g.byAddr[key]++
	g.mu.Unlock()
	if victim != nil {
		victim.c.Close()
	}
	return e, victim != nil
}

// busiest is the address with the most connections that has one to
// evict.
func (g *gate) busiest() netip.Prefix {
	var best netip.Prefix
	n := -1
	for _, e := range g.live {
		if !e.held && g.byAddr[e.key] > n {
			best, n = e.key, g.byAddr[e.key]
		}
	}
	return best
}

// oldestFree is the oldest connection not held: of address key when
// byKey, else of any address.
func (g *gate) oldestFree(key netip.Prefix, byKey bool) *entry {
	for _, e := range g.live {
		if !e.held && (!byKey || e.key == key) {
			return e
		}
	}
	return nil
}

func (g *gate) remove(e *entry) {
	e.gone = true
	for i, x := range g.live {
		if x == e {
			g.live = append(g.live[:i], g.live[i+1:]...)
			break
		}
	}
	if g.byAddr[e.key]--; g.byAddr[e.key] <= 0 {
		delete(g.byAddr, e.key)
	}
}

// leave takes e out of the gate; evicted says whether the gate had
// closed it to make room.
func (g *gate) leave(e *entry) (evicted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.gone {
		return true
	}
	g.remove(e)
	return false
}

// hold marks e as not to be evicted (held) or evictable again.
func (g *gate) hold(e *entry, held bool) {
	g.mu.Lock()
	e.held = held
	g.mu.Unlock()
}
