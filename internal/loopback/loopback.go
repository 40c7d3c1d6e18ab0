// Package loopback keeps jailctl's local HTTP servers (mcp --http, web)
// to the machine they run on and to whoever holds their token: a listener
// that binds a loopback address unless remote clients are allowed, the
// Host check that refuses a page of another site reaching one through DNS
// rebinding, and the token every request must carry (a loopback port is
// open to every local account, not only to the one that started jailctl).
package loopback

import (
	"errors"
	"fmt"
	"net"
)

// ErrNotLoopback is returned by Listen for an address that is not a
// loopback one when remote clients are not allowed.
var ErrNotLoopback = errors.New("not a loopback address")

// Listen listens on addr (HOST:PORT; port 0 picks a free one). Whoever
// reaches the listener acts as its caller of the daemon, so unless
// allowRemote the host must be a loopback address or "localhost", and the
// address bound must be one too; otherwise the error wraps ErrNotLoopback.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: want HOST:PORT: %w", addr, err)
	}
	if !allowRemote && !IsHost(host) {
		return nil, fmt.Errorf("address %q: %w", addr, ErrNotLoopback)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := l.Addr().(*net.TCPAddr); !allowRemote && (!ok || !tcp.IP.IsLoopback()) {
		// "localhost" resolved to something else.
		l.Close()
		return nil, fmt.Errorf("address %q bound %s: %w", addr, l.Addr(), ErrNotLoopback)
	}
	return l, nil
}

// IsHost reports whether host (no port) is "localhost" or a loopback IP.
func IsHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsHostHeader reports whether an HTTP Host header (HOST or HOST:PORT,
// an IPv6 address in brackets) names a loopback host. A page of another
// site that rebinds its name to 127.0.0.1 still sends its own name here.
func IsHostHeader(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return IsHost(host)
}
