package server

import (
	"context"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/tlsauth"
)

// TLSServer is the HTTP server of the TCP listener: the API of the
// socket, each request served as the client its certificate maps to
// (tlsauth). Serve it on TLSListener: the handshake refuses every
// certificate that maps to no client (or to two), before any HTTP; a
// client removed from the configuration since its connection's handshake
// is refused at its next request.
func (s *Server) TLSServer(auth *tlsauth.Auth) *http.Server {
	h := s.Handler()
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := auth.Authorize(r.TLS)
			if err != nil {
				s.writeError(w, r, errdefs.New(errdefs.ErrForbidden, "%v", err))
				return
			}
			who := s.peers.Client(id)
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, who)))
		}),
		// The handshake is bounded by the first of these (a client that
		// opens a connection and sends nothing holds it 10 s at most).
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.ReadTimeout.Duration,
		IdleTimeout:       s.cfg.IdleTimeout.Duration,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(&handshakeLog{s: s}, "", 0),
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
	}
}

// TLSListener wraps ln, the TLS listener's TCP listener, with the bounds
// of the configuration's [tls] (see peer.TLSListener): handshakes run
// off Accept, bounded in all and per source address apart from the
// connections whose handshake is done, which are bounded in all and per
// client. Refused handshakes are counted and logged as TLSServer's are;
// connections closed by the bounds are counted in
// jaild_connections_refused_total.
func (s *Server) TLSListener(ln net.Listener, auth *tlsauth.Auth) net.Listener {
	t := s.cfg.TLS
	hl := &handshakeLog{s: s}
	return peer.ListenTLS(ln, auth, peer.TLSLimits{
		MaxConns: t.MaxConnections, MaxConnsPerClient: t.MaxConnsPerClient(),
		MaxHandshakes: t.MaxHandshakes, MaxHandshakesPerAddr: t.MaxHandshakesPerAddress, HandshakeTimeout: t.HandshakeTimeout.Duration,
	}, func(reason string, err error) {
		if reason == peer.RefusedHandshake {
			hl.refused("TLS handshake error from " + err.Error())
			return
		}
		s.metrics.ConnRefused("tls", reason)
	})
}

// handshakeLog takes the TLS server's error log: refused handshakes (no or
// a foreign certificate, an unknown client, TLS 1.2, plain HTTP, a
// timeout) are counted (jaild_tls_handshake_failures_total) and logged at
// most once a minute, with how many there were since, so that a flood
// cannot fill the journal; other lines are logged as warnings.
type handshakeLog struct {
	s *Server

	mu     sync.Mutex
	last   time.Time
	silent int
}

func (l *handshakeLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if !strings.Contains(msg, "TLS handshake error") {
		l.s.log.Warn("tls listener", "err", msg)
		return len(p), nil
	}
	l.refused(msg)
	return len(p), nil
}

// refused counts a refused handshake and logs it, at most once a minute.
func (l *handshakeLog) refused(msg string) {
	l.s.tlsRefused.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= time.Minute {
		l.s.log.Info("tls listener: handshake refused", "err", msg, "refused_since_last_line", l.silent)
		l.last, l.silent = now, 0
	} else {
		l.silent++
	}
}
