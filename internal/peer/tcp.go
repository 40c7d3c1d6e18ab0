package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/tlsauth"
)

// TLSLimits bound the TLS listener's connections (config.TLS's keys of
// the same names).
type TLSLimits struct {
	// MaxConns bounds the connections whose handshake is done; handshakes
	// in progress do not take these slots.
	MaxConns int
	// MaxConnsPerClient bounds one client's (admins are exempt, as on the
	// socket).
	MaxConnsPerClient int
	// MaxHandshakes and MaxHandshakesPerAddr bound the handshakes in
	// progress (see gate); HandshakeTimeout each one's time.
	MaxHandshakes, MaxHandshakesPerAddr int
	HandshakeTimeout                    time.Duration
}

// Reasons a connection is refused, for the refused callback.
const (
	RefusedHandshake   = "handshake"          // the handshake failed (err says why)
	RefusedEvicted     = "evicted"            // silent: closed to make room for a new connection
	RefusedFull        = "full"               // no room: every connection in progress is under way (none to evict)
	RefusedMaxConns    = "max_connections"    // every slot of a done handshake is taken
	RefusedClientConns = "client_connections" // the client's slots are taken
)

// TLSListener is the TLS listener: it accepts TCP connections, runs
// their handshakes itself, off Accept, with the bounds of TLSLimits, and
// returns from Accept only connections (*tls.Conn) whose handshake is
// done and whose client has a slot. A connection over the slots is
// answered with an HTTP 503 (every slot) or 429 (its client's) and
// closed.
type TLSListener struct {
	ln      net.Listener
	cfg     *tls.Config
	auth    *tlsauth.Auth
	lim     TLSLimits
	refused func(reason string, err error)
	hs      *gate
	slots   chan struct{}

	mu        sync.Mutex
	perClient map[string]int

	ready chan net.Conn
	done  chan struct{}
	err   error
}

// ListenTLS serves ln's connections under auth with the bounds lim;
// refused is told of each connection refused (it must not block).
func ListenTLS(ln net.Listener, auth *tlsauth.Auth, lim TLSLimits, refused func(reason string, err error)) *TLSListener {
	l := &TLSListener{ln: ln, cfg: auth.TLSConfig(), auth: auth, lim: lim, refused: refused,
		hs: newGate(lim.MaxHandshakes, lim.MaxHandshakesPerAddr), slots: make(chan struct{}, lim.MaxConns),
		perClient: map[string]int{}, ready: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose handshake is done.
func (l *TLSListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close closes the listener; handshakes in progress end within their
// timeout.
func (l *TLSListener) Close() error { return l.ln.Close() }

// Addr is the listener's address.
func (l *TLSListener) Addr() net.Addr { return l.ln.Addr() }

func (l *TLSListener) acceptLoop() {
	var delay time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.err = err
				close(l.done)
				return
			}
			// Out of fds and the like: wait as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		e, evicted := l.hs.enter(c)
		if evicted {
			l.refused(RefusedEvicted, nil)
		}
		if e == nil {
			c.Close()
			l.refused(RefusedFull, nil)
			continue
		}
		go l.handshake(c, e)
	}
}

// handshake runs c's handshake and hands the connection to Accept.
func (l *TLSListener) handshake(c net.Conn, e *entry) {
	cc := &slotConn{Conn: c}
	base := l.cfg
	tc := tls.Server(cc, &tls.Config{MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			// The whole ClientHello is in: the client speaks, and is
			// not evicted for a silent one.
			l.hs.hold(e, true)
			return base.GetConfigForClient(h)
		}})
	_ = c.SetDeadline(time.Now().Add(l.lim.HandshakeTimeout))
	err := tc.Handshake()
	if evicted := l.hs.leave(e); err != nil {
		if !evicted {
			l.refused(RefusedHandshake, fmt.Errorf("%s: %w", c.RemoteAddr(), err))
		}
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	id, err := l.auth.Match(tc.ConnectionState().PeerCertificates[0])
	if err != nil { // the clients were reloaded since the handshake's check
		l.refused(RefusedHandshake, fmt.Errorf("%s: %w", c.RemoteAddr(), err))
		c.Close()
		return
	}
	if !id.Admin {
		l.mu.Lock()
		over := l.perClient[id.Name] >= l.lim.MaxConnsPerClient
		if !over {
			l.perClient[id.Name]++
		}
		l.mu.Unlock()
		if over {
			l.refused(RefusedClientConns, nil)
			refuse(tc, http.StatusTooManyRequests, "rate_limited", "too many open connections for this client (tls.max_connections_per_client); reuse one")
			return
		}
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.release(id)
		l.refused(RefusedMaxConns, nil)
		refuse(tc, http.StatusServiceUnavailable, "busy", "every connection slot of this listener is taken (tls.max_connections); retry later")
		return
	}
	cc.release = func() {
		l.release(id)
		<-l.slots
	}
	select {
	case l.ready <- tc:
	case <-l.done:
		tc.Close()
	}
}

func (l *TLSListener) release(id tlsauth.Identity) {
	if id.Admin {
		return
	}
	l.mu.Lock()
	if l.perClient[id.Name]--; l.perClient[id.Name] <= 0 {
		delete(l.perClient, id.Name)
	}
	l.mu.Unlock()
}

// refuse answers a connection over its bound with an HTTP error (the API's
// error shape) before any request, and closes it.
func refuse(c net.Conn, status int, typ, msg string) {
	body := `{"error":{"type":"` + typ + `","message":"` + msg + `"}}` + "\n"
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	c.Close()
}

// slotConn frees its slot once, when closed.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func() // nil until the connection has a slot
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// GateListener bounds a plain TCP listener's connections (metrics_listen):
// at most total open, perAddr per source address; beyond either, the
// oldest connection not serving a request is closed to make room (see
// gate), and when every one is serving a request the new one is refused.
// Serve it with ConnContext and Handler, so that a connection is held
// while it serves a request.
type GateListener struct {
	net.Listener
	g       *gate
	refused func(reason string)
}

// Gate wraps ln; refused is told of each connection refused or evicted
// (it must not block).
func Gate(ln net.Listener, total, perAddr int, refused func(reason string)) *GateListener {
	return &GateListener{Listener: ln, g: newGate(total, perAddr), refused: refused}
}

// Accept returns the next connection admitted.
func (l *GateListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		e, evicted := l.g.enter(c)
		if evicted {
			l.refused(RefusedEvicted)
		}
		if e == nil {
			c.Close()
			l.refused(RefusedFull)
			continue
		}
		return &gateConn{Conn: c, g: l.g, e: e}, nil
	}
}

type gateConn struct {
	net.Conn
	g    *gate
	e    *entry
	once sync.Once
}

func (c *gateConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.g.leave(c.e) })
	return err
}

type gateKey struct{}

// ConnContext is the http.Server's: it keeps the connection for Handler.
func (l *GateListener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*gateConn); ok {
		return context.WithValue(ctx, gateKey{}, gc)
	}
	return ctx
}

// Serve serves hs on l, with ConnContext and hs's handler wrapped by
// Handler.
func (l *GateListener) Serve(hs *http.Server) error {
	hs.Handler, hs.ConnContext = l.Handler(hs.Handler), l.ConnContext
	return hs.Serve(l)
}

// Handler holds the request's connection while h serves it.
func (l *GateListener) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gc, ok := r.Context().Value(gateKey{}).(*gateConn); ok {
			l.g.hold(gc.e, true)
			defer l.g.hold(gc.e, false)
		}
		h.ServeHTTP(w, r)
	})
}
