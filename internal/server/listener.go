package server

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/admission"
)

// Listener wraps the daemon's Unix listener: it identifies each caller
// with SO_PEERCRED when the connection is accepted, and bounds the number
// of open connections so that a flood cannot exhaust the daemon's fds.
type Listener struct {
	net.Listener
	srv   *Server
	slots chan struct{}

	mu    sync.Mutex
	perID map[uint32]int // open connections per non-admin uid
}

// MaxConnsPerUID bounds the open connections of one non-admin uid, so that
// one caller cannot hold every connection slot.
const MaxConnsPerUID = 64

// Listen wraps ln; at most maxConns connections are open at once (Accept
// waits for one to close beyond that), and at most MaxConnsPerUID per
// non-admin uid (beyond that a new connection is closed at once).
func (s *Server) Listen(ln net.Listener, maxConns int) *Listener {
	return &Listener{Listener: ln, srv: s, slots: make(chan struct{}, maxConns), perID: map[uint32]int{}}
}

// Accept returns the next connection, with its caller identified.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		who := l.srv.peer(c)
		if !who.Admin {
			l.mu.Lock()
			over := l.perID[who.UID] >= MaxConnsPerUID
			if !over {
				l.perID[who.UID]++
			}
			l.mu.Unlock()
			if over {
				l.srv.log.Warn("connection refused: too many open connections for this uid", "uid", who.UID, "max", MaxConnsPerUID)
				c.Close()
				<-l.slots
				continue
			}
		}
		release := func() {
			if !who.Admin {
				l.mu.Lock()
				if l.perID[who.UID]--; l.perID[who.UID] == 0 {
					delete(l.perID, who.UID)
				}
				l.mu.Unlock()
			}
			<-l.slots
		}
		return &peerConn{Conn: c, caller: who, release: release}, nil
	}
}

type peerConn struct {
	net.Conn
	caller  admission.Caller
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// peer identifies the caller of a connection with SO_PEERCRED. A
// connection whose credentials cannot be read is treated as the most
// restricted caller (uid nobody, never admin).
func (s *Server) peer(c net.Conn) admission.Caller {
	nobody := admission.Caller{UID: 65534, PID: -1}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nobody
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nobody
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return nobody
	}
	admin := s.isAdmin(cred.Uid, cred.Gid)
	return admission.Caller{UID: cred.Uid, PID: cred.Pid, Admin: admin, Network: s.mayNetwork(cred.Uid, cred.Gid, admin)}
}
