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
		pc := l.srv.peer(c)
		// Only what is known without a user or group lookup decides here:
		// a slow NSS or LDAP lookup must not stall every new connection.
		// Members of the admin group by a supplementary group only are
		// counted like other callers until their first request is served.
		exempt := l.srv.knownAdmin(pc.uid, pc.gid)
		if !exempt {
			l.mu.Lock()
			over := l.perID[pc.uid] >= MaxConnsPerUID
			if !over {
				l.perID[pc.uid]++
			}
			l.mu.Unlock()
			if over {
				l.srv.log.Warn("connection refused: too many open connections for this uid", "uid", pc.uid, "max", MaxConnsPerUID)
				c.Close()
				<-l.slots
				continue
			}
		}
		pc.release = func() {
			if !exempt {
				l.mu.Lock()
				if l.perID[pc.uid]--; l.perID[pc.uid] == 0 {
					delete(l.perID, pc.uid)
				}
				l.mu.Unlock()
			}
			<-l.slots
		}
		return pc, nil
	}
}

// peerConn is a connection with its peer's credentials. Who the caller is
// for the API (admin, network) is resolved on the first request, in that
// request's goroutine, and kept for the connection.
type peerConn struct {
	net.Conn
	srv      *Server
	uid, gid uint32
	pid      int32
	credOK   bool
	once     sync.Once
	release  func()

	resolve sync.Once
	caller  admission.Caller
}

// Caller returns the connection's caller, looking up group memberships
// the first time.
func (c *peerConn) Caller() admission.Caller {
	c.resolve.Do(func() {
		if !c.credOK {
			c.caller = admission.Caller{UID: 65534, PID: -1}
			return
		}
		admin := c.srv.isAdmin(c.uid, c.gid)
		c.caller = admission.Caller{UID: c.uid, PID: c.pid, Admin: admin, Network: c.srv.mayNetwork(c.uid, c.gid, admin)}
	})
	return c.caller
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// peer reads the credentials of a connection's peer with SO_PEERCRED (a
// syscall, no lookup). A connection whose credentials cannot be read is
// served as the most restricted caller (uid nobody, never admin).
func (s *Server) peer(c net.Conn) *peerConn {
	pc := &peerConn{Conn: c, srv: s, uid: 65534, gid: 65534, pid: -1, release: func() {}}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return pc
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return pc
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return pc
	}
	pc.uid, pc.gid, pc.pid, pc.credOK = cred.Uid, cred.Gid, cred.Pid, true
	return pc
}
