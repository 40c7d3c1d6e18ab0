package peer

import (
	"log/slog"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// Listener wraps the daemon's Unix listener: it identifies each caller
// with SO_PEERCRED when the connection is accepted, and bounds the number
// of open connections so that a flood cannot exhaust the daemon's fds.
type Listener struct {
	net.Listener
	policy *Policy
	log    *slog.Logger
	slots  chan struct{}

	mu    sync.Mutex
	perID map[uint32]int // open connections per non-admin uid
}

// MaxConnsPerUID bounds the open connections of one non-admin uid, so that
// one caller cannot hold every connection slot.
const MaxConnsPerUID = 64

// Listen wraps ln; at most maxConns connections are open at once (Accept
// waits for one to close beyond that), and at most MaxConnsPerUID per
// non-admin uid (beyond that a new connection is closed at once). Its
// connections are *Conn, their callers resolved under p.
func Listen(ln net.Listener, maxConns int, p *Policy, log *slog.Logger) *Listener {
	return &Listener{Listener: ln, policy: p, log: log, slots: make(chan struct{}, maxConns), perID: map[uint32]int{}}
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
		pc := credentials(c, l.policy)
		// Only what is known without a user or group lookup decides here:
		// a slow NSS or LDAP lookup must not stall every new connection.
		// Members of the admin group by a supplementary group only are
		// counted like other callers until their first request is served.
		exempt := l.policy.KnownAdmin(pc.uid, pc.gid)
		if !exempt {
			l.mu.Lock()
			over := l.perID[pc.uid] >= MaxConnsPerUID
			if !over {
				l.perID[pc.uid]++
			}
			l.mu.Unlock()
			if over {
				l.log.Warn("connection refused: too many open connections for this uid", "uid", pc.uid, "max", MaxConnsPerUID)
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

// Conn is a connection with its peer's credentials. Who the caller is
// for the API (admin, network) is resolved on the first request, in that
// request's goroutine, and kept for the connection.
type Conn struct {
	net.Conn
	policy   *Policy
	uid, gid uint32
	pid      int32
	credOK   bool
	once     sync.Once
	release  func()

	resolve sync.Once
	caller  Caller
}

// Caller returns the connection's caller, looking up group memberships
// the first time.
func (c *Conn) Caller() Caller {
	c.resolve.Do(func() {
		if !c.credOK {
			c.caller = Nobody
			return
		}
		c.caller = c.policy.Local(c.uid, c.gid, c.pid)
	})
	return c.caller
}

// Close closes the connection and frees its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// credentials reads the credentials of a connection's peer with
// SO_PEERCRED (a syscall, no lookup). A connection whose credentials
// cannot be read is served as the most restricted caller (Nobody).
func credentials(c net.Conn, p *Policy) *Conn {
	pc := &Conn{Conn: c, policy: p, uid: 65534, gid: 65534, pid: -1, release: func() {}}
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
