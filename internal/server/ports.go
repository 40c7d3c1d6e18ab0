package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

// A session's ports (issue 29): ANY /v1/sessions/{id}/ports/{port}/{path...}
// is proxied, HTTP and WebSocket upgrades, to 127.0.0.1:{port} inside the
// session's jail, through a connection the daemon makes in the jail's own
// network namespace (PortSession.DialPort): the request cannot reach the
// host's loopback or another session's, whatever its path or headers.

// PortSession is a Session whose ports the daemon reaches (run.Session).
type PortSession interface {
	DialPort(port int) (net.Conn, error)
}

// maxProxyHeaderBytes bounds the headers of a proxied response.
const maxProxyHeaderBytes = 64 << 10

// proxyError carries a dial's error from the transport to the handler.
type proxyError struct{ err error }

func (e *proxyError) Error() string { return e.err.Error() }
func (e *proxyError) Unwrap() error { return e.err }

func (s *Server) sessionPort(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	info, err := s.sessions.Get(id, sw)
	if err != nil {
		s.audit.refused(who, "session_port", err)
		return err
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return errdefs.Field("port", "must be a TCP port in 1..65535, got %q", trimHeader(r.PathValue("port")))
	}
	meta, _ := info.Meta.(*sessionMeta)
	var ps PortSession
	if meta != nil {
		ps, _ = meta.h.(PortSession)
	}
	if ps == nil {
		return errdefs.New(errdefs.ErrUnavailable, "sessions' ports cannot be reached on this daemon")
	}
	// The connection is made before the proxy runs, so that a refusal
	// is a clean JSON error.
	conn, err := ps.DialPort(port)
	if err != nil {
		s.audit.refused(who, "session_port", err)
		return err
	}
	var used atomic.Bool
	var sent, received atomic.Int64
	counted := &countedConn{Conn: conn, in: &received, out: &sent}
	tr := &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used.Swap(true) {
				return nil, &proxyError{errors.New("one connection per request")}
			}
			return counted, nil
		},
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxProxyHeaderBytes,
		ResponseHeaderTimeout:  time.Minute,
	}
	defer tr.CloseIdleConnections()
	defer counted.Close()
	path := "/" + r.PathValue("path")
	failed := error(nil)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(port)
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = pr.Out.URL.Host
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = err
		},
	}
	rp.ServeHTTP(w, r)
	s.audit.metrics.PortBytes(sent.Load(), received.Load())
	s.log.Info("audit", "op", "session_port", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id,
		"port", port, "method", r.Method, "bytes_to_jail", sent.Load(), "bytes_from_jail", received.Load())
	if failed != nil {
		if r.Context().Err() != nil {
			return nil // the client went away
		}
		return errdefs.New(errdefs.ErrBadGateway, "port %d of the session did not answer the request as HTTP", port)
	}
	return nil
}

// countedConn counts the bytes through a proxied connection.
type countedConn struct {
	net.Conn
	in, out *atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}
