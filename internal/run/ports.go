package run

import (
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's ports (issue 29): the daemon connects to 127.0.0.1:PORT in
// the session's own network namespace (jail.DialLoopback), for its owner's
// HTTP and WebSocket requests; the jail gets no new network. A frozen
// session's listeners cannot answer, so a port is reached while the
// session runs a background command (a server is one).

// DialPort connects to the session's port. The connection counts against
// spec.MaxPortConns until it is closed.
func (ss *Session) DialPort(port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.Field("port", "must be in 1..65535, got %d", port)
	}
	if !ss.tryCall() {
		return nil, errdefs.New(errdefs.ErrConflict, "the session is running a call or a foreground command; its ports are reached between them, while a background command runs")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return nil, ss.endedError()
	}
	ss.mu.Lock()
	paused := ss.paused != nil
	ss.mu.Unlock()
	if paused || ss.runningCommands(nil) == 0 {
		return nil, errdefs.New(errdefs.ErrConflict, "the session runs no background command: its processes are frozen between calls and nothing can answer on port %d (start the server as a background command)", port)
	}
	ss.cmdMu.Lock()
	if ss.portConns >= spec.MaxPortConns {
		ss.cmdMu.Unlock()
		return nil, errdefs.New(errdefs.ErrRateLimited, "the session has %d proxied connections open, the most it may", spec.MaxPortConns)
	}
	ss.portConns++
	ss.activity = time.Now() // a request to its server is use of the session
	ss.cmdMu.Unlock()
	c, err := ss.st.j.DialLoopback(port)
	if err != nil {
		ss.cmdMu.Lock()
		ss.portConns--
		ss.cmdMu.Unlock()
		if errors.Is(err, unix.ECONNREFUSED) {
			return nil, errdefs.New(errdefs.ErrBadGateway, "nothing listens on port %d in the session", port)
		}
		ss.s.log.Warn("dial session port", "id", ss.ID(), "port", port, "err", err)
		return nil, errdefs.New(errdefs.ErrBadGateway, "port %d of the session could not be reached", port)
	}
	return &portConn{Conn: c, release: func() {
		ss.cmdMu.Lock()
		ss.portConns--
		ss.cmdMu.Unlock()
	}}, nil
}

// portConn gives its slot back once, at Close.
type portConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *portConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
