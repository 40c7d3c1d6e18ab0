package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/loopback"
)

// Path is where the Streamable HTTP endpoint is served.
const Path = "/mcp"

// ErrNotLoopback is returned by Listen for an address that is not a
// loopback one when remote clients are not allowed.
var ErrNotLoopback = loopback.ErrNotLoopback

// Listen listens on addr (HOST:PORT; port 0 picks a free one) for
// ServeHTTP. The server has no authentication, and whoever reaches it runs
// code as its caller of the daemon, so unless allowRemote the host must be
// a loopback address or "localhost", and the address bound must be one
// too; otherwise the error wraps ErrNotLoopback (see loopback.Listen).
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	return loopback.Listen(addr, allowRemote)
}

// Handler returns the Streamable HTTP endpoint at Path; other paths are
// 404. MCP sessions are stateful (Mcp-Session-Id); the daemon sessions
// opened through one are deleted when it closes (the client's DELETE).
// An MCP session whose client vanished without a DELETE stays open, and
// its daemon sessions end at their idle timeout. The SDK refuses a request
// that reached a loopback address with a Host header that is not a
// loopback name (DNS rebinding), and a browser's cross-origin POST or
// DELETE is refused as well; both with 403. A request whose connection
// drops cancels its call, and so the run in the daemon, where the
// protocol version ties calls to requests (2026-07-28 and later).
func (s *Server) Handler() http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{MaxRequestBodyBytes: maxMessageBytes, PropagateRequestCancellation: true})
	mux := http.NewServeMux()
	mux.Handle(Path, http.NewCrossOriginProtection().Handler(h))
	return mux
}

// ServeHTTP serves Handler on l until ctx is done (nil) or serving fails.
// Requests in flight get a second to finish; open event streams are then
// closed. Then it ends the daemon sessions opened through it, waiting at
// most EndTimeout; sessions it could not end make an error that wraps
// ErrSessionsLeft. A Server serves once: later calls to open_session are
// refused.
func (s *Server) ServeHTTP(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return errors.Join(fmt.Errorf("serve MCP over HTTP: %w", err), s.owned.endAll(ctx))
	case <-ctx.Done():
	}
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	return s.owned.endAll(ctx)
}
