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
}

// Listen wraps ln; at most maxConns connections are open at once (Accept
// waits for one to close beyond that).
func (s *Server) Listen(ln net.Listener, maxConns int) *Listener {
	return &Listener{Listener: ln, srv: s, slots: make(chan struct{}, maxConns)}
}

// Accept returns the next connection, with its caller identified.
func (l *Listener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &peerConn{Conn: c, caller: l.srv.peer(c), release: func() { <-l.slots }}, nil
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
	return admission.Caller{UID: cred.Uid, PID: cred.Pid, Admin: s.isAdmin(cred.Uid, cred.Gid)}
}
